"""The llm-foundry suite kind: a row of MosaicML's MPT throughput tables as `data/workloads/mpt.py` run on
its GPUs, and its predicted optimizer step against the measured one (`step_time_s_derived`).

Each row is emulated on whole nodes of 8 virtual GPUs (deduplicated: FSDP's ranks are alike, so a
representative and one more rank to check it are captured), `STEPS` optimizer steps of its micro-batch and
gradient accumulation; the steady step (GradAccum micro-batches, the optimizer, the step's collectives)
is predicted on the row's GPU and cluster:

- A100 rows: `a100-roce-1600g` (8 A100 SXM a node on NVSwitch, 1600 Gb/s RoCE between nodes, as the
  tables say);
- H100 rows: `dgx-h100`. The tables name no network; as the data's README says, this assumes
  DGX-H100-class nodes (8 H100 SXM on NVSwitch, 8 x 400 Gb/s InfiniBand).

`amp_fp8` rows run the projections as Transformer Engine's `te.Linear` under its fp8 autocast (Composer's recipe):
they need fp8 tensor cores (not the A100 rows' GPUs) and TE's PyTorch extension, which the first such row installs
when it is missing (`maya.installer.transformer_engine`, as `MAYA_TE_AUTO` allows); without either the row fails, saying
why.

SDPA runs torch's FlashAttention-2 kernels on every GPU (`--sdpa-backend flash`): the kernel generation the
published runs used, shaped by the simulator from their aten op (see `data/workloads/README.md`).
"""

from __future__ import annotations

import importlib.util
import math
import sys
from functools import lru_cache
from pathlib import Path
from types import ModuleType

import pandas as pd

from maya.core import hardware
from maya.core.paths import data_dir
from maya.installer import transformer_engine

from .plan import GPUS_PER_NODE, Predicted, RowPlan, predict_plan
from .store import RowKey

CLUSTERS = {"a100_40gb": "a100-roce-1600g", "a100_80gb": "a100-roce-1600g", "h100_80gb": "dgx-h100"}
ASSUMPTIONS = {
    "h100_80gb": "H100 rows: the tables name no inter-node network; assumed DGX-H100-class nodes (8 H100 SXM on "
    "NVSwitch, 8 x 400 Gb/s InfiniBand): cluster dgx-h100",
    "a100_40gb": "A100 rows: 8 A100 SXM a node on NVSwitch, 1600 Gb/s RoCE between nodes (the tables): cluster "
    "a100-roce-1600g",
}
ASSUMPTIONS["a100_80gb"] = ASSUMPTIONS["a100_40gb"]
STEPS = 2
"""Optimizer steps emulated: the first is the warm-up, the second the steady step predicted."""
SDPA_BACKEND = "flash"
FP8_CAPABILITY = (8, 9)
"""The first compute capability with fp8 tensor cores (Ada; Hopper is 9.0)."""


def workload_script() -> Path:
    return data_dir() / "workloads" / "mpt.py"


@lru_cache(maxsize=1)
def mpt_rows() -> ModuleType:
    """`data/workloads/mpt_rows.py` (a row's columns -> `mpt.py` arguments; package data, not a package)."""
    path = data_dir() / "workloads" / "mpt_rows.py"
    spec = importlib.util.spec_from_file_location("maya_workload_mpt_rows", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def measured_s(values: pd.Series) -> float:
    """The measured optimizer step: GlobalBatchSize (T) / Throughput (T/s), as the data derives it."""
    return float(values["step_time_s_derived"])


def _check_fp8(gpu: str, part: str) -> None:
    """ValueError unless an `amp_fp8` row can run: on fp8 tensor cores (compute capability 8.9 or newer, from the
    hardware catalog), with Transformer Engine, installed here if it is not (`transformer_engine.ensure`)."""
    spec = hardware.get(part)
    if (spec.sm_major, spec.sm_minor) < FP8_CAPABILITY:
        raise ValueError(
            f"precision amp_fp8 needs fp8 tensor cores (compute capability {FP8_CAPABILITY[0]}.{FP8_CAPABILITY[1]} or "
            f"newer); GPU {gpu!r} ({part}) is {spec.sm_major}.{spec.sm_minor}: use amp_bf16"
        )
    transformer_engine.ensure(
        "precision amp_fp8 (the projections as Transformer Engine fp8 GEMMs: llm-foundry's fc_type te)"
    )


def plan(row: int, values: pd.Series) -> RowPlan:
    """The row as an emulation and prediction; ValueError names what the row asks that cannot be run."""
    columns = {k: str(v) for k, v in values.items()}
    gpu, gpus = columns["GPU"], int(values["# GPUs"])
    rows = mpt_rows()
    if gpu not in rows.HARDWARE:
        raise ValueError(f"GPU {gpu!r} is not one of {', '.join(rows.HARDWARE)}")
    if gpus < 1 or (gpus > GPUS_PER_NODE and gpus % GPUS_PER_NODE):
        raise ValueError(f"{gpus} GPUs do not fill nodes of {GPUS_PER_NODE}")
    if columns["Precision"] == "amp_fp8":
        _check_fp8(gpu, rows.HARDWARE[gpu])
    columns.setdefault("table", "")
    args = rows.workload_args(columns, steps=STEPS, sdpa_backend=SDPA_BACKEND)
    label = (
        f"{columns['Model']} s{columns['SeqLen (T)']} {gpus}×{gpu} mbs {columns['MicroBatchSize']} "
        f"ga {columns['GradAccum']} {columns['Precision']} {columns['Sharding Strategy']}"
        f"{' ckpt' if columns['Activation Checkpointing'].lower() == 'true' else ''}"
    )
    per_node = min(gpus, GPUS_PER_NODE)
    return RowPlan(
        key=RowKey(
            row=row,
            label=label,
            gpu=gpu,
            size=columns["Model"],
            gpus=gpus,
            measured_s=measured_s(values),
        ),
        script=workload_script(),
        args=tuple(args),
        hardware=rows.HARDWARE[gpu],
        cluster=CLUSTERS[gpu],
        nnodes=math.ceil(gpus / per_node),
        per_node=per_node,
        iterations=STEPS,
        assumptions=(ASSUMPTIONS[gpu],),
        seq=int(values["SeqLen (T)"]),
    )


def predict(plan: RowPlan, run_dir: Path, version: str, warehouse: Path | None) -> Predicted:
    """The steady optimizer step of the row's trace on its GPU and cluster, with its 10-90% band."""
    return predict_plan(plan, run_dir, version, warehouse)
