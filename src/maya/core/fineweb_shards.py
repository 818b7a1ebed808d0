"""Synthetic FineWeb token shards for the modded-nanogpt speed-run scripts, with documents of realistic length
(written by the `modded-nanogpt` validation suite; the simulator's stand-in for document masks it cannot read
uses the same document lengths).

The scripts read `data/fineweb10B/fineweb_{train,val}_*.bin` under their working directory: llm.c's shard
format, a header of 256 int32 (magic 20240520, version 1, the token count) then the tokens as uint16. Their
FlexAttention masks follow the document boundaries, the EOS token (50256) that starts every FineWeb document
in the GPT-2 tokenization, so the block sparsity of a run depends on where EOS sits: random tokens would put it
once every 50,257 tokens (documents of ~50k tokens, a nearly causal mask), far sparser in documents than the
real data.

Here documents are drawn independently, each of `1 + round(L)` tokens (the EOS, then `round(L)` random non-EOS
GPT-2 tokens) with L log-normal, `ln L ~ N(ln(DOC_MEAN) - DOC_SIGMA**2 / 2, DOC_SIGMA**2)`: mean DOC_MEAN =
700 tokens, median 425, one document in ten beyond ~1,530 (FineWeb's documents run several hundred to a
thousand GPT-2 tokens on average, with a long tail). The same seed writes the same bytes.
"""

from __future__ import annotations

import math
import os
import tempfile
from pathlib import Path

import numpy as np

MAGIC, VERSION = 20240520, 1
HEADER_INTS = 256
EOS = 50256
VOCAB = 50257
DOC_MEAN = 700.0
"""Mean document length in tokens (the EOS included)."""
DOC_SIGMA = 1.0
"""Standard deviation of the log of a document's length."""
TRAIN_TOKENS = 8 * 2**20
"""Tokens of the train shard: 16 steps of the records' 8 x 64k-token batch."""
VAL_TOKENS = 12 * 2**20
"""Tokens of the val shard: more than any record's `val_tokens` (10,485,760) and one batch."""


def document_lengths(count: int, seed: int = 0) -> np.ndarray:
    """`count` document lengths (tokens, the EOS included, at least 1) from the stated distribution."""
    rng = np.random.default_rng(seed)
    mu = math.log(DOC_MEAN) - DOC_SIGMA**2 / 2
    return np.maximum(1, np.rint(rng.lognormal(mu, DOC_SIGMA, count))).astype(np.int64)


def tokens(count: int, seed: int = 0) -> np.ndarray:
    """`count` uint16 GPT-2 tokens: documents of `document_lengths`, each starting with EOS."""
    if count < 1:
        raise ValueError(f"a shard holds at least one token, not {count}")
    lengths = document_lengths(int(count / DOC_MEAN * 1.5) + 16, seed)
    while lengths.sum() < count:  # practically never: 1.5x the expected number of documents
        lengths = np.concatenate([lengths, document_lengths(len(lengths), seed + len(lengths))])
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    out = np.random.default_rng(seed + 1).integers(0, EOS, count, dtype=np.uint16)
    out[starts[starts < count]] = EOS
    return out


def write_shard(path: Path, count: int, seed: int = 0) -> Path:
    """One shard of `count` tokens at `path` (written atomically: a temporary file renamed)."""
    header = np.zeros(HEADER_INTS, dtype=np.int32)
    header[:3] = MAGIC, VERSION, count
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    os.fchmod(fd, 0o644)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(header.tobytes())
            f.write(tokens(count, seed).tobytes())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_shards(root: Path, seed: int = 0, train_tokens: int = TRAIN_TOKENS, val_tokens: int = VAL_TOKENS) -> Path:
    """`root/data/fineweb10B/fineweb_train_000001.bin` and `fineweb_val_000000.bin`; returns `root`. Shards
    already there with the expected size are kept."""
    folder = Path(root) / "data" / "fineweb10B"
    for name, count, offset in (
        ("fineweb_train_000001.bin", train_tokens, 0),
        ("fineweb_val_000000.bin", val_tokens, 2),
    ):
        path = folder / name
        if not (path.is_file() and path.stat().st_size == 4 * HEADER_INTS + 2 * count):
            write_shard(path, count, seed + offset)
    return Path(root)
