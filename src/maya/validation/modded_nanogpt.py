"""The modded-nanogpt suite kind: speed-run records of KellerJordan/modded-nanogpt, each an unmodified
`train_gpt.py` with its published step time and peak memory, in the `published.json` layout:

    FOLDER/published.json   {"rows": [{"record": NAME, "torch": ..., "step_avg_ms": ..., "peak_memory_allocated_mib": ...}]}
    FOLDER/NAME/train_gpt.py

(the built-in `modded-nanogpt` is `data/published/modded_nanogpt/`: six records, with their licence and
provenance). Each record runs as published, `torchrun --standalone --nproc_per_node=8 train_gpt.py`, on 8
virtual H100 SXM (`maya emulate --iterations 3`: iteration 0 holds the validation pass at step 0, compilation
and autotuning; iterations 1 and 2 are the steady step), in a working directory holding synthetic FineWeb
shards with documents of realistic length (`maya.core.fineweb_shards`), and is predicted on one DGX-H100 node.
The steady step is compared with `step_avg_ms` (the log's training time per step, validation excluded) and
the predicted peak allocated memory of rank 0 (torch's caching allocator's `max_memory_allocated()` in the
emulated run, not the device memory it held) with `peak_memory_allocated_mib` where the record prints it
(`details.memory_error_pct`).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pandas as pd

from maya.core.paths import data_dir, maya_home

from .plan import GPUS_PER_NODE, Predicted, RowPlan, predict_plan
from .store import RowKey

HARDWARE = "h100-sxm"
CLUSTER = "dgx-h100"
ITERATIONS = 3
"""Optimizer steps emulated: step 0 (validation, compilation, tuning), then two steady steps."""
SCRIPT = "train_gpt.py"
COLUMNS = ("record", "torch", "step_avg_ms")
ASSUMPTIONS = (
    "modded-nanogpt records: 8 H100 80GB HBM3 SXM on NVSwitch (the logs' nvidia-smi): cluster dgx-h100",
    "FineWeb shards stood in for by random tokens with documents of log-normal length (mean 700 tokens), "
    "EOS (50256) at each document's start: maya.core.fineweb_shards",
)


def builtin_folder() -> Path:
    return data_dir() / "published" / "modded_nanogpt"


def read_folder(folder: Path) -> pd.DataFrame:
    """The rows of a folder in the `published.json` layout, with each script's path and SHA-256 (the suite's
    digest covers the scripts). ValueError names what is missing or malformed."""
    index = folder / "published.json"
    try:
        rows = json.loads(index.read_text())["rows"]
    except FileNotFoundError:
        raise ValueError(f"{folder}: no published.json (a modded-nanogpt suite folder holds one)") from None
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        raise ValueError(f"{index}: not a published.json with a 'rows' list ({type(e).__name__}: {e})") from None
    table = pd.DataFrame(rows)
    missing = [c for c in COLUMNS if c not in table.columns]
    if table.empty or missing:
        raise ValueError(f"{index}: rows need the keys {', '.join(COLUMNS)} (missing: {', '.join(missing) or 'rows'})")
    if "peak_memory_allocated_mib" not in table.columns:
        table["peak_memory_allocated_mib"] = None
    scripts = [folder / str(record) / SCRIPT for record in table["record"]]
    absent = [str(p) for p in scripts if not p.is_file()]
    if absent:
        raise ValueError(f"{folder}: record script(s) missing: {', '.join(absent)}")
    table["script"] = [str(p) for p in scripts]
    table["script_sha256"] = [hashlib.sha256(p.read_bytes()).hexdigest() for p in scripts]
    return table


def workdir() -> Path:
    """Where the records run: the synthetic shards under `data/fineweb10B/`, the scripts' `logs/`."""
    return maya_home() / "validation" / "modded-nanogpt"


def measured_s(values: pd.Series) -> float:
    """The published step: the log's last `step_avg` (training time per step, validation excluded)."""
    return float(values["step_avg_ms"]) / 1e3


def plan(row: int, values: pd.Series) -> RowPlan:
    """The record as an emulation and prediction (the shards are written once into `workdir()`)."""
    from importlib.metadata import version

    from maya.core.fineweb_shards import write_shards

    record = str(values["record"])
    script = Path(str(values["script"]))
    return RowPlan(
        key=RowKey(
            row=row, label=record, gpu="h100_80gb", size=record, gpus=GPUS_PER_NODE, measured_s=measured_s(values)
        ),
        script=script,
        args=(),
        hardware=HARDWARE,
        cluster=CLUSTER,
        per_node=GPUS_PER_NODE,
        iterations=ITERATIONS,
        assumptions=(
            *ASSUMPTIONS,
            f"{record}: emulated under torch {version('torch')} (the record ran torch {values['torch']})",
        ),
        workdir=write_shards(workdir()),
        measured_memory_mib=_mib(values.get("peak_memory_allocated_mib")),
    )


def predict(plan: RowPlan, run_dir: Path, version: str, warehouse: Path | None) -> Predicted:
    """The steady step on 8 H100 SXM of a DGX-H100, its band, and rank 0's predicted peak allocated memory."""
    predicted = predict_plan(plan, run_dir, version, warehouse)
    allocated, rank = rank_0_allocated(predicted.details)
    comparison = memory_comparison(
        allocated or predicted.peak_memory_bytes, plan.measured_memory_mib, held=not allocated
    )
    if comparison and allocated and rank not in (0, None):  # rank 0 was not captured: another rank's peak, named
        comparison["memory_compared"] += f" (rank {rank}'s: rank 0 was not captured)"
    predicted.details.update(comparison)
    return predicted


def rank_0_allocated(details: dict) -> tuple[int | None, int | None]:
    """The allocated peak the records' rank 0 prints, and the rank it is from: rank 0's where captured, else the
    lowest captured rank's; (the job's peak, None) from a prediction without per-rank peaks."""
    by_rank = {int(r): int(b) for r, b in (details.get("peak_allocated_bytes_by_rank") or {}).items()}
    if not by_rank:
        return details.get("peak_allocated_bytes"), None
    rank = 0 if 0 in by_rank else min(by_rank)
    return by_rank[rank], rank


def memory_comparison(peak_bytes: int | None, published_mib: float | None, *, held: bool = False) -> dict:
    """The published peak (`torch.cuda.max_memory_allocated()`) and the signed error (%) of the predicted one,
    where the record prints a peak. `held`: the prediction has only the device memory the allocator held (a
    capture that did not record the allocator's peaks), its cached blocks included, and says so."""
    if published_mib is None or not peak_bytes:
        return {}
    return {
        "peak_memory_published_mib": published_mib,
        "memory_error_pct": 100.0 * (peak_bytes / 2**20 / published_mib - 1.0),
        "memory_compared": "held by the caching allocator (no allocated peak recorded)" if held else "allocated",
    }


def _mib(value: object) -> float | None:
    return None if value is None or pd.isna(value) else float(value)
