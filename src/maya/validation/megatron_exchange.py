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
never modified. The patch is written for core_r0.19.0's `p2p_communication.py`: a checkout whose file differs (by
its git blob hash) runs stock, and the row's assumptions say so (`NOT_APPLIED`).
"""

from __future__ import annotations

import glob
import hashlib
import os
import re
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
NOT_APPLIED = (
    "pipeline stages exchange the whole activation from every tensor-parallel rank (megatron-core's exchange): "
    "Megatron-LM's 2022 exchange, 1/TP of each activation all-gathered on receipt, was not applied because the "
    "checkout's p2p_communication.py differs from core_r0.19.0's, the file its patch is written for"
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


def checkout_for(values: pd.Series, checkout: Path) -> tuple[Path, tuple[str, ...]]:
    """The checkout the row runs and what it assumes of the exchange: the patched copy and `ASSUMPTION` where the
    exchange applies and the patch was written for the checkout's file, else the checkout itself (with
    `NOT_APPLIED` where the exchange applies)."""
    if not applies(values):
        return checkout, ()
    if not fits(checkout):
        return checkout, (NOT_APPLIED,)
    return patched(checkout), (ASSUMPTION,)


def fits(checkout: Path) -> bool:
    """Whether `checkout`'s file is the one `PATCH` was written for: its git blob hash starts with the one on the
    patch's `index` line."""
    text = PATCH.read_text()
    target = re.search(r"^--- a/(\S+)$", text, re.MULTILINE)
    index = re.search(r"^index ([0-9a-f]+)\.\.", text, re.MULTILINE)
    if target is None or index is None:
        raise ValueError(f"{PATCH.name} names no file or blob (its '--- a/' and 'index' lines)")
    file = checkout / target.group(1)
    return file.is_file() and _blob(file.read_bytes()).startswith(index.group(1))


def _blob(data: bytes) -> str:
    """Git's object name of a file with these contents (`git hash-object`)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def patched(checkout: Path) -> Path:
    """A copy of `checkout`'s `megatron/` and top-level files with `PATCH` applied, made once per content of
    those files and patch under `$MAYA_HOME/megatron-lm/patched/` (whole or not at all); making it removes the
    copies of the same checkout (by path) made for other contents. ValueError says why the patch does not apply."""
    files = _copied(checkout)
    key = files_digest(PATCH.read_text(), [(p, checkout) for p in files])
    where = hashlib.sha256(str(checkout.resolve()).encode()).hexdigest()[:8]
    prefix = f"{checkout.name}-{where}-p2p2022-"
    path = settings.home() / "megatron-lm" / "patched" / f"{prefix}{key}"

    def make(partial: Path) -> None:
        for file in files:
            target = partial / file.relative_to(checkout)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(file, target, follow_symlinks=False)
        error = _apply(partial)
        if error is not None:
            raise ValueError(f"{PATCH.name} does not apply to the Megatron-LM checkout {checkout}: {error}")

    return folder_made_once(path, "pretrain_gpt.py", make, replaces=f"{glob.escape(prefix)}*")


def _copied(checkout: Path) -> list[Path]:
    """What a patched copy holds, each file in its key: every top-level file (the entry points, and what tools read
    at the checkout's root: pyenv's `.python-version` picks the `python3-config` Megatron's dataset helpers are built
    with) and every file under `megatron/` but Python's byte-code caches; no other folder (data, checkpoints)."""
    package = (p for p in (checkout / "megatron").rglob("*") if "__pycache__" not in p.relative_to(checkout).parts)
    return sorted(p for p in checkout.iterdir() if p.is_file()) + sorted(p for p in package if p.is_file())


def _apply(into: Path) -> str | None:
    """Apply `PATCH` in `into` (git apply, never looking for a repository above it); git's error when it fails."""
    env = {**os.environ, "GIT_CEILING_DIRECTORIES": str(into.parent)}
    env.pop("GIT_DIR", None)
    done = subprocess.run(["git", "apply", str(PATCH)], cwd=into, env=env, capture_output=True, text=True)
    return done.stderr.strip()[-300:] if done.returncode else None
