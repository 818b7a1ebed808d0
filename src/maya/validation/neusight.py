"""The NeuSight suite kind: a row of NeuSight's `e2e_labels.parquet` (a Hugging Face model's forward and
backward on one GPU, fp32) as `data/workloads/neusight_train.py` run on that GPU, and the predicted forward +
backward against the measured one.

The script measures as NeuSight did: CUDA events around the forward and around `loss.backward()`. The
prediction is what those events would read on the simulated schedule: the span between the simulated
completions of the records around each phase, the median over the steady iterations (the first one
excluded). Measured = NeuSight's mean of the 5 fastest of 25 passes (`fw_ms + bw_ms`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from maya.core import hardware as catalog
from maya.core.paths import data_dir

from .plan import Predicted, RowPlan
from .store import RowKey

ITERATIONS = 3
"""Passes emulated: the first is the warm-up."""
RECORDS_PER_ITERATION = 4
"""The script records its two events around the forward and around the backward."""
IDLE = "(no kernel running)"


def workload_script() -> Path:
    return data_dir() / "workloads" / "neusight_train.py"


def measured_s(values: pd.Series) -> float:
    """NeuSight's measured forward + backward."""
    return (float(values["fw_ms"]) + float(values["bw_ms"])) / 1e3


def plan(row: int, values: pd.Series) -> RowPlan:
    """The row as an emulation and prediction; ValueError names what the row asks that cannot be run."""
    from maya.estimators.neusight_data import neusight_dir

    if values["mode"] != "train" or values["parallel"] != "single":
        raise ValueError(
            f"only single-GPU training rows are supported (mode {values['mode']!r}, parallel {values['parallel']!r})"
        )
    try:
        hw = catalog.get(str(values["device"]))
    except catalog.UnknownHardware as e:
        raise ValueError(str(e)) from None
    config = neusight_dir() / "model_configs" / f"{values['model']}.json"
    if not config.is_file():
        raise ValueError(f"no model config {config.name} in {config.parent}")
    batch, seq = int(values["batch"]), int(values["seqlen"])
    return RowPlan(
        key=RowKey(
            row=row,
            label=f"{values['model']} b{batch} s{seq} on {hw.name}",
            gpu=hw.name,
            size=str(values["model"]),
            gpus=1,
            measured_s=measured_s(values),
        ),
        script=workload_script(),
        args=(str(config), "--batch", str(batch), "--seq", str(seq), "--iterations", str(ITERATIONS), "--sample", "1"),
        hardware=hw.name,
        cluster=None,
        iterations=0,
        seq=seq,
    )


def predict(plan: RowPlan, run_dir: Path, version: str, warehouse: Path | None) -> Predicted:
    """The simulated forward + backward windows of the row's trace, with the band's replays' windows."""
    from maya.api import PredictOptions, replay

    options = PredictOptions(
        hardware=plan.hardware, durations="estimators", estimator_version=version, warehouse=warehouse, band=True
    )
    replayed = replay(run_dir, options)
    sim, prediction, band = replayed.simulation, replayed.prediction, replayed.band
    fw, bw = windows(sim)
    residual = sorted(sum(windows(s)) for s in band.simulations) if band and band.simulations else None
    spans = band.widen(fw + bw, *residual) if residual else None
    families, flops, dependent = where_time_goes(sim)
    return Predicted(
        predicted_s=(fw + bw) / 1e3,
        band_low_s=spans[0] / 1e3 if spans else None,
        band_high_s=spans[1] / 1e3 if spans else None,
        oom=prediction.oom,
        oom_reason=prediction.oom_reason,
        peak_memory_bytes=prediction.peak_memory_bytes,
        memory_capacity_bytes=prediction.memory_capacity_bytes,
        mfu=None,
        details={
            "fw_ms": fw,
            "bw_ms": bw,
            "iteration_ms": prediction.iteration_ns / 1e6,
            "families_ms": families,
            "fw_flops": flops[0],
            "bw_flops": flops[1],
            "data_dependent": dependent,
            "notes": prediction.notes,
            "band_discrepancy": band.to_dict()["discrepancy"] if band else None,
            "band_residual_ms": residual,
        },
    )


def _records(sim) -> tuple[np.ndarray, np.ndarray]:
    """The call index of each event record of rank 0 and its simulated completion time (ns)."""
    from maya.simulator.opcodes import RECORD

    program, result = sim.programs[0], sim.result(0)
    calls = np.flatnonzero(program.opcodes == RECORD)
    return calls, result.records[program.arg[calls]]


def windows(sim) -> tuple[float, float]:
    """Forward and backward ms: the median over the steady passes of the spans between their records."""
    calls, times = _records(sim)
    if len(calls) < 2 * RECORDS_PER_ITERATION or len(calls) % RECORDS_PER_ITERATION:
        raise RuntimeError(
            f"{len(calls)} event records; expected {RECORDS_PER_ITERATION} per pass and at least two passes"
        )
    spans = (times[1::2] - times[::2]).reshape(-1, 2)[1:] / 1e6
    fw, bw = np.median(spans, axis=0)
    return float(fw), float(bw)


def where_time_goes(sim) -> tuple[dict, tuple[float, float], int]:
    """In the last pass's forward and backward windows: device ms per kernel family (and the part with no
    kernel running), the GEMM and attention FLOPs, and the calls whose result depends on values only a GPU
    computes (emulated stand-ins; the script's own timing reads excepted)."""
    from maya.simulator.opcodes import DEVICE_OPS

    calls, times = _records(sim)
    frame, device = sim.programs[0].frame, sim.devices[0]
    work = np.isin(sim.programs[0].opcodes, DEVICE_OPS) & (device > 0)
    last = calls[-RECORDS_PER_ITERATION:]
    spans = (times[-RECORDS_PER_ITERATION:][1::2] - times[-RECORDS_PER_ITERATION:][::2]) / 1e6
    families, flops = {}, []
    for phase, (a, b), span in (("forward", last[:2], spans[0]), ("backward", last[2:], spans[1])):
        window = np.zeros(len(work), dtype=bool)
        window[a:b] = work[a:b]
        per_family = pd.Series(device[window] / 1e6, index=frame["family"].to_numpy()[window]).groupby(level=0).sum()
        per_family[IDLE] = max(span - per_family.sum(), 0.0)
        families[phase] = {str(k): float(v) for k, v in per_family.items()}
        flops.append(float(np.nansum(frame["flops"].to_numpy(dtype="float64")[a:b])))
    dependent = (
        frame["data_dependent"].fillna(False).to_numpy(dtype=bool) & (frame["api"] != "cudaEventElapsedTime").to_numpy()
    )
    return families, (flops[0], flops[1]), int(dependent[last[0] : last[-1]].sum())
