"""Offline stand-ins for what llm-foundry's pretraining yamls download: a small synthetic text corpus as
MosaicML Streaming (MDS) shards in `OUT/data/{train,val}` (the `text` dataset's layout) and a byte-level
BPE tokenizer trained on it in `OUT/tokenizer` (loadable with transformers' AutoTokenizer).

    python llm_foundry_data.py OUT    # in an environment with llm-foundry installed
"""

import random
import sys
from pathlib import Path

from streaming import MDSWriter
from tokenizers import Tokenizer, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

WORDS = (
    "the model trains on tokens of text and every step updates its weights by the gradient of the loss "
    "a virtual gpu runs each kernel while the emulator records what the script asks of it"
).split()


def corpus(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(200, 400))) for _ in range(n)]


def main(out: Path) -> None:
    texts = {"train": corpus(512, 0), "val": corpus(64, 1)}
    for split, samples in texts.items():
        with MDSWriter(out=str(out / "data" / split), columns={"text": "str"}, compression=None) as writer:
            for text in samples:
                writer.write({"text": text})
    tokenizer = Tokenizer(models.BPE(unk_token="<|endoftext|>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.train_from_iterator(texts["train"], trainers.BpeTrainer(vocab_size=512, special_tokens=["<|endoftext|>"]))
    special = "<|endoftext|>"  # as GPT-NeoX's: end of text, and the padding the text loader needs
    PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, eos_token=special, bos_token=special, unk_token=special, pad_token=special
    ).save_pretrained(out / "tokenizer")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
