"""What one suite row asks for (`RowPlan`), what predicting it gave (`Predicted`), and the digests that
decide when a stored result or a cached trace still holds."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

import maya
from maya.core import settings
from maya.core.clusters import cluster_names, load_cluster
from maya.core.digest import files_digest
from maya.emulator.capture_cache import emulator_digest, installed_packages

from .store import RowKey

if TYPE_CHECKING:
    from maya.api import PredictOptions

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
    sources: Path | None = None
    """A folder of Python code the script imports from outside the installed packages (a checkout's package): its
    `.py` files are part of `command_hash`."""

    def command_hash(self) -> str:
        """Identifies the emulation: the script's content and its `sources`' Python files, its arguments, the virtual
        GPUs, the emulator and the installed packages' releases."""
        blob = json.dumps(
            [
                hashlib.sha256(self.script.read_bytes()).hexdigest(),
                self.args,
                self.hardware,
                self.nnodes,
                self.per_node,
                self.iterations,
                emulator_digest(),
                installed_packages(),
                *([self.env] if self.env else []),
                *([str(self.workdir)] if self.workdir else []),
                *([sources_digest(self.sources)] if self.sources else []),
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


BAND_DETAILS = (
    "shares",
    "unmodelled_share",
    "composed_share",
    "discrepancy",
    "residual_low_ns",
    "residual_high_ns",
    "apriori",
)
"""What of a prediction's band a row keeps (`benchmarks/band_calibration.py` reads the residual band, the
a-priori widths and the discrepancy back)."""


def row_options(hardware: str, cluster: object, version: str, warehouse: str | Path | None = None) -> PredictOptions:
    """How `maya validate` predicts a row: on its GPU and cluster (a stored missing cluster, NaN, is none), with the
    registered estimators of `version`, and with the band."""
    from maya.api import PredictOptions

    return PredictOptions(
        hardware=hardware,
        cluster=cluster if isinstance(cluster, str) else None,
        durations="estimators",
        estimator_version=version,
        warehouse=warehouse,
        band=True,
    )


def predict_plan(plan: RowPlan, run_dir: Path, version: str, warehouse: Path | None, **details) -> Predicted:
    """The steady iteration of a row's trace on its GPUs and cluster with its 10-90% band (`maya.api.predict`,
    nothing stored): its breakdown, MFU and HFU, notes, assumptions and band shares in `details`, with the
    suite kind's own `details` added."""
    from maya.api import predict as predict_run

    p = predict_run(run_dir, row_options(plan.hardware, plan.cluster, version, warehouse))
    band = p.band or {}
    return Predicted(
        predicted_s=p.iteration_ns / 1e9,
        band_low_s=band["low_ns"] / 1e9 if band else None,
        band_high_s=band["high_ns"] / 1e9 if band else None,
        oom=p.oom,
        oom_reason=p.oom_reason,
        peak_memory_bytes=p.peak_memory_bytes,
        memory_capacity_bytes=p.memory_capacity_bytes,
        mfu=p.mfu,
        details={
            "breakdown_s": {k: v / 1e3 for k, v in p.to_dict(per_rank=False)["breakdown_ms"].items()},
            "hfu": p.hfu,
            "mfu_dtype": p.mfu_dtype,
            "peak_allocated_bytes": p.peak_allocated_bytes,
            "peak_allocated_bytes_by_rank": p.allocated_peaks_by_rank,
            "steady_iterations": p.steady_iterations,
            "captured_ranks": p.captured_ranks,
            "simulated_ranks": p.simulated_ranks,
            "notes": p.notes,
            "assumptions": p.assumptions,
            "band": {k: v for k, v in band.items() if k in BAND_DETAILS},
            **details,
        },
    )


def predictor_digest() -> str:
    """Of what turns a trace and an estimator version into a prediction: `maya.api.predictor_digest` (the api,
    simulator, estimators, core and maya_trace_spec sources, the hardware, cluster and collective data, the band's discrepancy widths, the
    public kernel measurements the attention model is fitted on), validation's source and the host factor (`MAYA_HOST_FACTOR`, as resolved:
    unset and `0` are one). A changed one re-predicts every row."""
    return hashlib.sha256(f"{_sources_digest()}\0{_host_factor()}".encode()).hexdigest()[:16]


def _host_factor() -> str:
    """The host factor the rows are predicted with: `$MAYA_HOST_FACTOR` as a number; unset, 0 unless a shipped
    cluster states its own (then each row's cluster's, whose file is in the sources digest)."""
    chosen = settings.host_factor()
    if chosen is None and any(load_cluster(name).host_factor is not None for name in cluster_names()):
        return "clusters"
    return repr(chosen or 0.0)


@lru_cache(maxsize=8)
def sources_digest(folder: Path) -> str:
    """Of the `.py` files under `folder` (a checkout's package), by path and contents."""
    return files_digest("", [(p, folder) for p in sorted(folder.rglob("*.py"))])


@lru_cache(maxsize=1)
def _sources_digest() -> str:
    """The predictor's digest (`maya.api.predictor_digest`: its source and shipped data) and validation's source."""
    from maya.api import predictor_digest as predictor_source

    root = Path(maya.__file__).parent
    return files_digest(predictor_source(), [(p, root) for p in sorted((root / "validation").rglob("*.py"))])
