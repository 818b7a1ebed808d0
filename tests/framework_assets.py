"""Offline assets the framework runs need, made here rather than downloaded: a synthetic `c4_test`
dataset (torchtitan's test dataset, which its snapshot lacks), a small byte-level BPE tokenizer trained
on it with Hugging Face `tokenizers` (the shape of torchtitan's `tests/assets/tokenizer`: under 2,048
tokens, with `<|begin_of_text|>` / `<|end_of_text|>`), and random token shards in llm.c's format where
the modded-nanogpt speed-run scripts read FineWeb."""

import json
import random
from pathlib import Path

import numpy as np

WORDS = (
    "the of and to in a is that for it as was with be by on not he this are or his from at which but have an "
    "they you were her she there one all we their been has when who will more if no out so said what up its "
    "about into than them can only other new some could time these two may then do first any my now such like "
    "our over man me even most made after also did many before must through back years where much your way "
    "well down should because each just those people how too little state good very make world still own see "
    "men work long get here between both life being under never day same another know while last might us "
    "great old year off come since against go came right used take three"
).split()
SPECIAL = ["<|begin_of_text|>", "<|end_of_text|>", "<|pad|>"]


def write_c4_test(root: Path, documents: int = 2000, seed: int = 0) -> Path:
    """`root/tests/assets/c4_test/data.json`: JSON lines of {"text": ...}, as `load_dataset` reads it."""
    rng = random.Random(seed)
    folder = root / "tests" / "assets" / "c4_test"
    folder.mkdir(parents=True, exist_ok=True)
    lines = (
        json.dumps({"text": " ".join(rng.choice(WORDS) for _ in range(rng.randint(80, 400)))}) for _ in range(documents)
    )
    (folder / "data.json").write_text("\n".join(lines) + "\n")
    return folder


def write_tokenizer(folder: Path, corpus: Path, vocab_size: int = 2000) -> Path:
    """A byte-level BPE `tokenizer.json` and `tokenizer_config.json` in `folder`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=SPECIAL, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    texts = [json.loads(line)["text"] for line in corpus.read_text().splitlines()]
    tok.train_from_iterator(texts, trainer)
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "bos_token": SPECIAL[0],
                "eos_token": SPECIAL[1],
                "pad_token": SPECIAL[2],
                "tokenizer_class": "PreTrainedTokenizerFast",
                "model_max_length": 131072,
            }
        )
    )
    return folder


def torchtitan_assets(root: Path) -> Path:
    """The working directory torchtitan's debug configs expect: `./tests/assets/c4_test` and
    `./tests/assets/tokenizer`; returns `root`."""
    data = write_c4_test(root)
    write_tokenizer(root / "tests" / "assets" / "tokenizer", data / "data.json")
    return root


FINEWEB_MAGIC, FINEWEB_VERSION = 20240520, 1
"""The header of llm.c's token shards (`fineweb_train_*.bin`): 256 int32 (magic, version, token count, ...)."""


def write_fineweb_shards(
    root: Path, train_tokens: int = 2_000_000, val_tokens: int = 1_000_000, vocab: int = 50257, seed: int = 0
) -> Path:
    """`root/data/fineweb10B/fineweb_{train_000001,val_000000}.bin`: random GPT-2 token ids in llm.c's shard
    format, which the speed-run scripts read from there; returns `root`."""
    rng = np.random.default_rng(seed)
    folder = root / "data" / "fineweb10B"
    folder.mkdir(parents=True, exist_ok=True)
    for name, count in (("fineweb_train_000001.bin", train_tokens), ("fineweb_val_000000.bin", val_tokens)):
        header = np.zeros(256, dtype=np.int32)
        header[:3] = FINEWEB_MAGIC, FINEWEB_VERSION, count
        (folder / name).write_bytes(header.tobytes() + rng.integers(0, vocab, count, dtype=np.uint16).tobytes())
    return root


NANOGPT_ENV = "MAYA_NANOGPT_REPO"
"""A checkout of karpathy/nanoGPT (tests/frameworks/test_nanogpt.py and benchmarks/frameworks.py read it)."""
NANOGPT_FILES = ("train.py", "model.py", "configurator.py", "config")


def nanogpt_assets(root: Path, checkout: Path | None = None, seed: int = 0) -> Path:
    """A nanoGPT working directory in `root`: the checkout's `train.py`, `model.py`, `configurator.py` and
    `config/` (copied, unchanged: train.py reads its config and data relative to the working directory), and the
    data its `prepare.py` scripts would download, stood in for by random tokens: `data/shakespeare_char/`
    (65 characters, with its `meta.pkl`) and `data/openwebtext/` (GPT-2 token ids) as uint16 `train.bin` /
    `val.bin`. `checkout` defaults to $MAYA_NANOGPT_REPO; returns `root`."""
    import os
    import pickle
    import shutil

    checkout = Path(checkout or os.environ[NANOGPT_ENV])
    root.mkdir(parents=True, exist_ok=True)
    for name in NANOGPT_FILES:
        source = checkout / name
        if source.is_dir():
            shutil.copytree(source, root / name, dirs_exist_ok=True)
        else:
            shutil.copy(source, root / name)
    rng = np.random.default_rng(seed)
    for dataset, vocab, tokens in (("shakespeare_char", 65, 1_000_000), ("openwebtext", 50257, 2_000_000)):
        folder = root / "data" / dataset
        folder.mkdir(parents=True, exist_ok=True)
        for split, count in (("train", tokens), ("val", tokens // 10)):
            rng.integers(0, vocab, count, dtype=np.uint16).tofile(folder / f"{split}.bin")
    chars = [chr(c) for c in range(32, 32 + 65)]
    meta = {"vocab_size": 65, "itos": dict(enumerate(chars)), "stoi": {c: i for i, c in enumerate(chars)}}
    (root / "data" / "shakespeare_char" / "meta.pkl").write_bytes(pickle.dumps(meta))
    return root


def write_wikitext(root: Path, lines: int = 20000, seed: int = 0) -> Path:
    """`root/data/wikitext-2.txt`, where Lightning's demo `WikiText2` dataset looks before downloading it: lines
    of random words (the English ones and 5,000 made-up ones: a vocabulary of about 5,200); returns `root`."""
    rng = random.Random(seed)
    words = [*WORDS, *(f"w{i}" for i in range(5000))]
    (root / "data").mkdir(parents=True, exist_ok=True)
    (root / "data" / "wikitext-2.txt").write_text(
        "".join(" ".join(rng.choice(words) for _ in range(20)) + "\n" for _ in range(lines))
    )
    return root


PICOTRON_ENV = "MAYA_PICOTRON_REPO"
"""A checkout of huggingface/picotron (tests/frameworks/test_picotron.py reads it)."""
SMOLLM_1_7B = {"hidden_size": 2048, "intermediate_size": 8192, "num_attention_heads": 32, "num_key_value_heads": 32}
"""SmolLM-1.7B's widths (picotron's quick-start model), which `picotron_assets` defaults to."""


def picotron_assets(root: Path, layers: int = 4, vocab: int = 49152, sizes: dict | None = None, seed: int = 0) -> Path:
    """What picotron downloads from the Hub, made in `root`: a Llama model directory `root/model` (a `config.json`
    as SmolLM's on the Hub, of SmolLM-1.7B's widths or `sizes`, and a byte-level BPE tokenizer of 2,000 tokens trained here), the
    safetensors file picotron reads its layer names from (`root/hf_model_safetensors/model.safetensors`, bf16
    zeros for `layers` layers: it loads them, then re-initialises every weight), and a JSON-lines dataset
    directory `root/data` of random English words (`load_dataset` reads it); returns `root`."""
    import torch
    from safetensors.torch import save_file

    sizes = {**SMOLLM_1_7B, **(sizes or {})}
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": vocab, **sizes}
    config |= {"num_hidden_layers": layers, "max_position_embeddings": 2048, "rope_theta": 10000.0}
    config |= {"rms_norm_eps": 1e-5, "hidden_act": "silu", "tie_word_embeddings": True, "torch_dtype": "bfloat16"}
    (root / "model").mkdir(parents=True, exist_ok=True)
    (root / "model" / "config.json").write_text(json.dumps(config, indent=2))
    data = root / "data"
    data.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    lines = (
        json.dumps({"text": " ".join(rng.choice(WORDS) for _ in range(rng.randint(300, 900)))}) for _ in range(400)
    )
    (data / "train.jsonl").write_text("\n".join(lines) + "\n")
    write_tokenizer(root / "model", data / "train.jsonl")
    width, inner = sizes["hidden_size"], sizes["intermediate_size"]
    kv = width // sizes["num_attention_heads"] * sizes["num_key_value_heads"]
    shapes = {"model.embed_tokens.weight": (vocab, width), "model.norm.weight": (width,)}
    for i in range(layers):
        layer = f"model.layers.{i}."
        shapes |= {layer + "input_layernorm.weight": (width,), layer + "post_attention_layernorm.weight": (width,)}
        shapes |= {layer + f"self_attn.{p}_proj.weight": (width, width) for p in "qo"}
        shapes |= {layer + f"self_attn.{p}_proj.weight": (kv, width) for p in "kv"}
        shapes |= {layer + f"mlp.{p}_proj.weight": (inner, width) for p in ("gate", "up")}
        shapes[layer + "mlp.down_proj.weight"] = (width, inner)
    (root / "hf_model_safetensors").mkdir(parents=True, exist_ok=True)
    tensors = {name: torch.zeros(shape, dtype=torch.bfloat16) for name, shape in shapes.items()}
    save_file(tensors, str(root / "hf_model_safetensors" / "model.safetensors"))
    return root
