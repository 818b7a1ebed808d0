"""What one suite row asks for (`RowPlan`), what predicting it gave (`Predicted`), and the digests that
decide when a stored result or a cached trace still holds."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import maya
from maya.core.paths import data_dir
from maya.emulator.capture_cache import emulator_digest

from .store import RowKey

GPUS_PER_NODE = 8


@dataclass(frozen=True)
class RowPlan:
    """One row as something to emulate and predict."""

    key: RowKey
    script: Path
    args: tuple[str, ...]
    hardware: str
    """Maya hardware catalog name."""
    cluster: str | None
    nnodes: int = 1
    per_node: int = 1
    iterations: int = 2
    """Training iterations emulated (`maya emulate --iterations`): the first holds the warm-up."""
    assumptions: tuple[str, ...] = ()
    """What the row does not say and the prediction assumes (printed by `maya validate`)."""
    seq: int | None = None
    """Tokens a sequence (the summary groups rows by it)."""
    env: tuple[tuple[str, str], ...] = ()
    """Added to every rank's environment (`EmulateOptions.env`)."""
    workdir: Path | None = None
    """The working directory the script runs in (the data it reads relative to it); None: the caller's."""
    measured_memory_mib: float | None = None
    """The row's measured peak allocated memory, where it has one."""

    def command_hash(self) -> str:
        """Identifies the emulation: the script's content, its arguments, the virtual GPUs and the emulator."""
        blob = json.dumps(
            [
                hashlib.sha256(self.script.read_bytes()).hexdigest(),
                self.args,
                self.hardware,
                self.nnodes,
                self.per_node,
                self.iterations,
                emulator_digest(),
                *([self.env] if self.env else []),
                *([str(self.workdir)] if self.workdir else []),
            ]
        )
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


@dataclass
class Predicted:
    """What the simulator made of a row's trace."""

    predicted_s: float
    band_low_s: float | None
    band_high_s: float | None
    oom: bool
    oom_reason: str | None
    peak_memory_bytes: int
    memory_capacity_bytes: int
    mfu: float | None
    details: dict = field(default_factory=dict)
    """Breakdown, notes, assumptions and kind-specific figures (stored as JSON)."""


@lru_cache(maxsize=1)
def predictor_digest() -> str:
    """Of what turns a trace and an estimator version into a prediction: the simulator, estimators and
    validation sources, the hardware, cluster and collective data. A changed one re-predicts every row."""
    root = Path(maya.__file__).parent
    files = [p for package in ("simulator", "estimators", "validation") for p in sorted((root / package).rglob("*.py"))]
    files += [
        p for folder in ("hardware", "clusters", "collectives") for p in sorted((data_dir() / folder).glob("*.json"))
    ]
    return _digest(files, maya.__version__)


def _digest(files: list[Path], salt: str) -> str:
    h = hashlib.sha256(salt.encode())
    for path in files:
        h.update(path.name.encode() + b"\0" + path.read_bytes())
    return h.hexdigest()[:16]
