"""Blocks the modded-nanogpt records' FlexAttention kernels compute, averaged over each record's window schedule,
against the document-causal stand-in Maya prices them by (no window): a measurement for finding the mechanism
behind the records' error, not a prediction.

    .venv/bin/python benchmarks/flex_window_blocks.py

Documents are the stand-in's (`triton_work.stand_in_documents`: the synthetic shards' log-normal lengths, mean 700
tokens), 128-token blocks. Each record's mask is rebuilt as its script builds it (`train_gpt.py` under
`data/published/modded_nanogpt/`):
- 2024-11-24 WindowWarmup: `create_block_mask` of a document-causal mask with a token window
  `64 * ((step / N * (1792 - 64) + 64) // 64)`: the blocks holding an allowed pair (`triton_work.document_blocks`);
- 2025-01-13 Fp8LmHead: the block-wise window `q_block - kv_block < window // 128` on the document-causal blocks;
- 2025-01-26 onwards: partial blocks clamped to `max(sw - full, 1)`, full ones to `sw - 1`, with `sw = window // 128`
  for the layers given the long mask and `sw // 2` for the short ones; `window = next_multiple_of_n(1728 * step / N,
  128)`.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from maya.simulator.triton_work import document_blocks, stand_in_blocks, stand_in_documents

BLOCK = 128


def block_masks(documents: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The document-causal mask's (query block x key block) partial and full blocks, and `q - kv` in blocks."""
    n = len(documents) // BLOCK
    low, high = documents.reshape(n, BLOCK)[:, 0], documents.reshape(n, BLOCK)[:, -1]
    q, kv = np.arange(n)[:, None], np.arange(n)[None, :]
    any_ = (q >= kv) & (low[:, None] <= high[None, :]) & (high[:, None] >= low[None, :])
    full = (q > kv) & (low[:, None] == high[None, :]) & (high[:, None] == low[None, :])
    return any_ & ~full, full, q - kv


def clamped_blocks(partial: np.ndarray, full: np.ndarray, sw: int) -> int:
    """Blocks of the 2025-01-26+ masks: each query block's partial count clamped to `max(sw - full, 1)`, its full
    count to `sw - 1` (both at least 0)."""
    p, f = partial.sum(axis=1), full.sum(axis=1)
    return int((np.minimum(p, np.maximum(sw - f, 1)) + np.clip(np.minimum(f, sw - 1), 0, None)).sum())


def windowed_blocks(partial: np.ndarray, full: np.ndarray, distance: np.ndarray, sw: int) -> int:
    """Blocks of the 2025-01-13 mask: document-causal blocks within `sw` blocks of the query block."""
    return int(((partial | full) & (distance < sw)).sum())


def window(step: int, steps: int) -> int:
    """The 2025 records' window in tokens at `step`: `next_multiple_of_n(1728 * step / steps, n=128)`."""
    return math.ceil(1728 * step / steps / BLOCK) * BLOCK


def main() -> None:
    for name, tokens, steps, long_short in (
        ("2024-11-24_WindowWarmup", 65536, 1750, None),
        ("2025-01-13_Fp8LmHead", 65536, 1395, None),
        ("2025-01-26_BatchSize / 2025-02-01_RuleTweak", 49152, 1770, (4, 8)),
        ("2025-02-08_medium_WeightDecay", 65536, 7150, (4, 12)),
    ):
        documents = stand_in_documents(tokens)
        stand_in = stand_in_blocks(tokens, tokens, BLOCK, BLOCK, True)
        partial, full, distance = block_masks(documents)
        if name.startswith("2024"):
            count = functools.cache(functools.partial(document_blocks, documents, tokens, tokens, BLOCK, BLOCK))
            blocks = [count(int(64 * ((s / steps * (1792 - 64) + 64) // 64))) for s in range(steps)]
        elif long_short is None:
            count = functools.cache(functools.partial(windowed_blocks, partial, full, distance))
            blocks = [count(window(s, steps) // BLOCK) for s in range(steps)]
        else:
            layers_long, layers_short = long_short
            count = functools.cache(functools.partial(clamped_blocks, partial, full))
            blocks = [
                (layers_long * count(sw) + layers_short * count(sw // 2)) / (layers_long + layers_short)
                for sw in (window(s, steps) // BLOCK for s in range(steps))
            ]
        mean = float(np.mean(blocks))
        print(
            f"{name}: stand-in {stand_in} blocks per (batch, head); schedule mean {mean:.0f} ({mean / stand_in:.3f});"
            f" at step 2 {blocks[2]:.0f}"
        )


if __name__ == "__main__":
    main()
