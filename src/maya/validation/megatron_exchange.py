"""Megatron-LM's 2022 pipeline exchange for the rows measured on it: a copy of the checkout with
`p2p_communication.py` patched to send 1/TP of each activation and all-gather it in the tensor-parallel group on
receipt.

Until megatron-core replaced it, Megatron-LM's `scatter_gather_tensors_in_pipeline` (on by default) had each
tensor-parallel rank send only its 1/TP slice of the stage's activation, replicated across the group without
sequence parallelism, and rebuild the whole tensor with an all-gather on NVSwitch after receiving it; with sequence
parallelism the activation is already scattered over the sequence and it was not used. megatron-core 0.19 sends the
whole activation from every rank (TP times the bytes between nodes). Rows measured on the 2022 stack (their `source`
starts with one of `SOURCES`) with TP > 1, PP > 1 and no sequence parallelism run the patch (`PATCH`, both
directions and the interleaved schedule's overlapped receives), applied to a cached copy: the user's checkout is
never modified.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pandas as pd

from maya.core import settings
from maya.core.digest import files_digest
from maya.core.paths import data_dir, folder_made_once

PATCH = data_dir() / "published" / "megatron" / "p2p_scatter_gather_2022.patch"
"""The exchange as a patch of megatron-core 0.19's `megatron/core/pipeline_parallel/p2p_communication.py`."""
SOURCES = ("Korthikanti et al. 2022",)
"""Sources whose measurements ran Megatron-LM with its 2022 default, `scatter_gather_tensors_in_pipeline`."""
ASSUMPTION = (
    "pipeline stages exchange 1/TP of each activation and all-gather it in the tensor-parallel group on receipt, "
    "as Megatron-LM's 2022 default scatter_gather_tensors_in_pipeline did without sequence parallelism "
    "(megatron-core sends the whole activation from every tensor-parallel rank): a patched copy of the checkout"
)


def applies(values: pd.Series) -> bool:
    """Whether the row's measured stack exchanged scattered activations: a 2022 source, TP > 1, PP > 1 and no
    sequence parallelism in the row."""
    source = str(values.get("source", ""))
    tp, pp = (_size(values.get(c)) for c in ("tensor_model_parallel_size", "pipeline_model_parallel_size"))
    sequence_parallel = str(values.get("sequence_parallel", "")).strip().lower() == "true"
    return source.startswith(SOURCES) and tp > 1 and pp > 1 and not sequence_parallel


def _size(value: object) -> int:
    """A parallel size cell; 1 when empty."""
    try:
        return int(float(str(value)))
    except ValueError:
        return 1


def patched(checkout: Path) -> Path:
    """A copy of `checkout` with `PATCH` applied, made once per checkout content and patch under
    `$MAYA_HOME/megatron-lm/patched/` (whole or not at all). ValueError says why the patch does not apply."""
    sources = sorted(checkout.glob("*.py")) + sorted((checkout / "megatron").rglob("*.py"))
    key = files_digest(PATCH.read_text(), [(p, checkout) for p in sources])
    path = settings.home() / "megatron-lm" / "patched" / f"{checkout.name}-p2p2022-{key}"

    def make(partial: Path) -> None:
        shutil.copytree(checkout, partial, ignore=shutil.ignore_patterns(".git"), symlinks=True)
        error = _apply(partial)
        if error is not None:
            raise ValueError(f"{PATCH.name} does not apply to the Megatron-LM checkout {checkout}: {error}")

    return folder_made_once(path, "pretrain_gpt.py", make)


def _apply(into: Path) -> str | None:
    """Apply `PATCH` in `into` (git apply, never looking for a repository above it); git's error when it fails."""
    env = {**os.environ, "GIT_CEILING_DIRECTORIES": str(into.parent)}
    env.pop("GIT_DIR", None)
    done = subprocess.run(["git", "apply", str(PATCH)], cwd=into, env=env, capture_output=True, text=True)
    return done.stderr.strip()[-300:] if done.returncode else None
