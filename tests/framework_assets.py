"""Offline assets the framework runs need, made here rather than downloaded: a synthetic `c4_test`
dataset (torchtitan's test dataset, which its snapshot lacks) and a small byte-level BPE tokenizer
trained on it with Hugging Face `tokenizers` (the shape of torchtitan's `tests/assets/tokenizer`:
under 2,048 tokens, with `<|begin_of_text|>` / `<|end_of_text|>`)."""
import json
import random
from pathlib import Path

WORDS = ("the of and to in a is that for it as was with be by on not he this are or his from at which but have an "
         "they you were her she there one all we their been has when who will more if no out so said what up its "
         "about into than them can only other new some could time these two may then do first any my now such like "
         "our over man me even most made after also did many before must through back years where much your way "
         "well down should because each just those people how too little state good very make world still own see "
         "men work long get here between both life being under never day same another know while last might us "
         "great old year off come since against go came right used take three").split()
SPECIAL = ["<|begin_of_text|>", "<|end_of_text|>", "<|pad|>"]


def write_c4_test(root: Path, documents: int = 2000, seed: int = 0) -> Path:
    """`root/tests/assets/c4_test/data.json`: JSON lines of {"text": ...}, as `load_dataset` reads it."""
    rng = random.Random(seed)
    folder = root / "tests" / "assets" / "c4_test"
    folder.mkdir(parents=True, exist_ok=True)
    lines = (json.dumps({"text": " ".join(rng.choice(WORDS) for _ in range(rng.randint(80, 400)))})
             for _ in range(documents))
    (folder / "data.json").write_text("\n".join(lines) + "\n")
    return folder


def write_tokenizer(folder: Path, corpus: Path, vocab_size: int = 2000) -> Path:
    """A byte-level BPE `tokenizer.json` and `tokenizer_config.json` in `folder`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    texts = [json.loads(line)["text"] for line in corpus.read_text().splitlines()]
    tok.train_from_iterator(texts, trainer)
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "bos_token": SPECIAL[0], "eos_token": SPECIAL[1], "pad_token": SPECIAL[2],
        "tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 131072}))
    return folder


def torchtitan_assets(root: Path) -> Path:
    """The working directory torchtitan's debug configs expect: `./tests/assets/c4_test` and
    `./tests/assets/tokenizer`; returns `root`."""
    data = write_c4_test(root)
    write_tokenizer(root / "tests" / "assets" / "tokenizer", data / "data.json")
    return root
