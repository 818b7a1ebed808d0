"""The megatron suite kind: a row of measured Megatron-LM runs as Megatron-LM's own `pretrain_gpt.py` with the row's
arguments, emulated on its GPUs and predicted against the measured iteration (`measured_step_s`).

A row's columns are `pretrain_gpt.py` argument names (underscores for dashes) plus `row`, `model`, `gpu`, `gpus`,
`precision` and `measured_step_s` (`source` and any other column not an argument are listed in `META`). A value
`true` is the flag, `false` or an empty cell leaves Megatron's default; `recompute_granularity` `none` is no
recomputation; `precision` `fp16`, `bf16` or `fp8` (`--fp8-format hybrid` over bf16). Every row adds what Megatron
needs without apex and Transformer Engine and with mock data (`FIXED_ARGS`: the local transformer implementation,
unfused layer norm, softmax and weight-gradient accumulation, a null tokenizer of the row's `vocab_size`), and runs
`STEPS` iterations: the first holds the warm-up, the second is the steady one predicted. Sequence parallelism is
dropped, and the row says so (`WITHOUT_SP`): Megatron's local implementation refuses it without apex or Transformer
Engine.

The checkout is `MAYA_MEGATRON_LM`, or the Megatron-LM branch of the installed megatron-core's release
(`core_r<major>.<minor>.0`) cloned once into `$MAYA_HOME/megatron-lm/<branch>`. Ranks run as whole nodes of 8
(deduplicated by the emulator: a few ranks stand for the others) on the row's GPU; the cluster is the file's
`cluster` column where it has one, else DGX A100 (`dgx-a100`) for A100 rows and DGX H100 (`dgx-h100`) for H100
rows. Rows measured on the Megatron-LM of 2022 with TP > 1, PP > 1 and no sequence parallelism run a patched copy
of the checkout whose pipeline stages exchange 1/TP of each activation, as that stack did (`megatron_exchange`;
core_r0.19.0's exchange only: another checkout runs them stock and says so).
"""

from __future__ import annotations

import math
import subprocess
from importlib import metadata
from pathlib import Path

import pandas as pd

from maya.core import settings
from maya.core.paths import folder_made_once
from maya.installer import transformer_engine

from . import megatron_exchange
from .plan import GPUS_PER_NODE, Predicted, RowPlan, predict_plan
from .store import RowKey

META = ("row", "model", "gpu", "gpus", "precision", "measured_step_s", "source", "cluster")
"""Columns that are not `pretrain_gpt.py` arguments."""
REQUIRED = ("model", "gpu", "gpus", "precision", "measured_step_s", "tensor_model_parallel_size", "num_layers")
HARDWARE = {"a100_40gb": "a100-sxm-40gb", "a100_80gb": "a100-sxm-80gb", "h100_80gb": "h100-sxm"}
CLUSTERS = {"a100_40gb": "dgx-a100", "a100_80gb": "dgx-a100", "h100_80gb": "dgx-h100"}
PRECISION = {"fp16": ("--fp16",), "bf16": ("--bf16",), "fp8": ("--bf16", "--fp8-format", "hybrid")}
STEPS = 2
"""Training iterations emulated: the first is the warm-up, the second the steady iteration predicted."""
COMMON_ARGS = (
    "--mock-data",
    "--tokenizer-type",
    "NullTokenizer",
    "--lr",
    "1e-4",
    "--eval-iters",
    "0",
    "--eval-interval",
    "1000",
    "--log-interval",
    "1",
)
"""What every row adds: mock data and Megatron's logging of every iteration."""
LOCAL_ARGS = (
    "--transformer-impl",
    "local",
    "--no-gradient-accumulation-fusion",
    "--no-persist-layer-norm",
    "--no-masked-softmax-fusion",
)
"""Without Transformer Engine: Megatron's local implementation, as it runs without apex."""
TE_ARGS = (
    "--transformer-impl",
    "transformer_engine",
    "--attention-backend",
    "unfused",
    "--no-gradient-accumulation-fusion",
)
"""With Transformer Engine: TE's layers and its unfused dot-product attention (Megatron sets NVTE_FLASH_ATTN=0,
NVTE_FUSED_ATTN=0, NVTE_UNFUSED_ATTN=1 for it); weight-gradient accumulation stays unfused, since Megatron's own
LM head (`ColumnParallelLinear`) refuses the fusion without apex's `fused_weight_gradient_mlp_cuda`."""
ENV = {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}
"""What Megatron asks of the environment for tensor and sequence parallelism."""
ASSUMPTION = (
    "Transformer Engine is not installed for the interpreter that ran the row, so Megatron rows run pretrain_gpt.py's local transformer implementation without apex: layer norm, masked softmax "
    "and weight-gradient accumulation unfused, where the measured runs used apex's fused kernels; the unfused "
    "masked softmax alone (scale, mask and their autograd copies over the whole score tensor) makes the prediction "
    "slower than the measured stack (measured on the korthikanti2022 22B rows: docs/validation-and-accuracy.md)"
)
WITHOUT_SP = (
    "sequence parallelism dropped: Megatron's local transformer implementation refuses it without apex or "
    "Transformer Engine (torch LayerNorm); the tensor-parallel all-reduces move what its reduce-scatters and "
    "all-gathers would, and layer norm and dropout run over the whole sequence instead of 1/TP of it, and keep "
    "their activations whole: with selective recomputation s·b·h·(10 + 24/t) bytes a layer instead of s·b·h·34/t "
    "(3x at TP 8), so a row that fits a GPU with sequence parallelism can run out of memory without it"
)
TE_ASSUMPTION = (
    "Megatron rows run pretrain_gpt.py with Transformer Engine (--transformer-impl transformer_engine) and TE's "
    "unfused dot-product attention (--attention-backend unfused): QK^T and the weighted sum of values as GEMMs with "
    "TE's fused scaled masked softmax between them (one kernel each way, the causal mask read as a tensor), as the "
    "measured runs used apex's upper-triangular one (no flash or cuDNN fused attention in 2022); TE's fused layer "
    "norm (in its LayerNormLinear), sequence parallelism as the row "
    "asks; weight-gradient accumulation unfused (separate adds into the fp32 main gradients), where the measured "
    "runs fused it with apex"
)


def checkout() -> Path:
    """The Megatron-LM checkout: `MAYA_MEGATRON_LM`, else the installed megatron-core's release branch, cloned once
    into `$MAYA_HOME/megatron-lm/`. ValueError (the row cannot run) says what is missing."""
    named = settings.MEGATRON_LM.get()
    if named:
        path = Path(named).expanduser()
        if not (path / "pretrain_gpt.py").is_file():
            raise ValueError(f"MAYA_MEGATRON_LM={named}: no pretrain_gpt.py there (a Megatron-LM checkout)")
        return path
    try:
        version = metadata.version("megatron-core")
    except metadata.PackageNotFoundError:
        raise ValueError(
            "megatron suites run Megatron-LM: install megatron-core and set MAYA_MEGATRON_LM to a checkout of "
            "NVIDIA/Megatron-LM at its release"
        ) from None
    major, minor = version.split(".")[:2]
    branch = f"core_r{major}.{minor}.0"
    path = settings.home() / "megatron-lm" / branch

    def make(partial: Path) -> None:
        error = _clone(branch, partial)
        if error is not None:
            raise ValueError(
                f"could not clone Megatron-LM's {branch} (megatron-core {version}): {error}; "
                "set MAYA_MEGATRON_LM to a checkout"
            )

    return folder_made_once(path, "pretrain_gpt.py", make)


def _clone(branch: str, into: Path) -> str | None:
    """Shallow-clone Megatron-LM's `branch` into `into`; the end of git's error output when it fails."""
    clone = ["git", "clone", "--depth", "1", "--branch", branch, "https://github.com/NVIDIA/Megatron-LM", str(into)]
    done = subprocess.run(clone, capture_output=True, text=True)
    return done.stderr.strip()[-300:] if done.returncode else None


def measured_s(values: pd.Series) -> float:
    """The measured seconds per iteration."""
    return float(values["measured_step_s"])


def _given(value: object) -> str | None:
    """The cell as text; None when empty."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    text = str(value).strip()
    return text or None


def _integer(value: object) -> str:
    """`8.0` (a column pandas read as floats for its empty cells) as `8`."""
    text = str(value)
    return text[:-2] if text.endswith(".0") and text[:-2].isdigit() else text


def pretrain_args(values: pd.Series, sequence_parallel: bool) -> list[str]:
    """The row's `pretrain_gpt.py` arguments (`COMMON_ARGS` and the implementation's not included); its
    `--sequence-parallel` only where `sequence_parallel` (see `WITHOUT_SP`). ValueError names a bad cell."""
    args: list[str] = []
    for column, value in values.items():
        text = _given(value)
        if column in META or (column == "sequence_parallel" and not sequence_parallel) or text is None:
            continue
        flag = "--" + str(column).replace("_", "-")
        lowered = text.lower()
        if lowered in ("true", "false"):
            args += [flag] if lowered == "true" else []
        elif column == "recompute_granularity" and lowered == "none":
            continue
        else:
            args += [flag, _integer(text)]
    if _given(values.get("num_query_groups")) is not None:
        args.append("--group-query-attention")
    if _given(values.get("max_position_embeddings")) is None and _given(values.get("seq_length")) is not None:
        args += ["--max-position-embeddings", _integer(values["seq_length"])]
    precision = str(values["precision"]).lower()
    if precision not in PRECISION:
        raise ValueError(f"precision {values['precision']!r} is not one of {', '.join(PRECISION)}")
    return args + list(PRECISION[precision])


def _sequence_parallel(values: pd.Series) -> bool:
    return str(values.get("sequence_parallel", "")).strip().lower() == "true"


def plan(row: int, values: pd.Series) -> RowPlan:
    """The row as an emulation and prediction, with Transformer Engine where this interpreter has it (its label ends
    `[TE]`, else `[local]`, and its assumptions say which); ValueError names what the row asks that cannot be run."""
    gpu, gpus = str(values["gpu"]), int(values["gpus"])
    if gpu not in HARDWARE:
        raise ValueError(f"GPU {gpu!r} is not one of {', '.join(HARDWARE)}")
    if gpus < 1 or (gpus > GPUS_PER_NODE and gpus % GPUS_PER_NODE):
        raise ValueError(f"{gpus} GPUs do not fill nodes of {GPUS_PER_NODE}")
    root, exchange = megatron_exchange.checkout_for(values, checkout())
    script = root / "pretrain_gpt.py"
    te = transformer_engine.installed()
    args = [*pretrain_args(values, sequence_parallel=te), *COMMON_ARGS, *(TE_ARGS if te else LOCAL_ARGS)]
    args += ["--train-iters", str(STEPS)]
    granularity = _given(values.get("recompute_granularity")) or "none"
    parallel = "".join(
        f" {name}{_integer(values[column])}"
        for name, column in (("tp", "tensor_model_parallel_size"), ("pp", "pipeline_model_parallel_size"))
        if _given(values.get(column)) is not None
    )
    label = (
        f"{values['model']} {gpus}×{gpu}{parallel} {values['precision']} recompute {granularity}"
        f"{' sp' if _sequence_parallel(values) else ''} [{'TE' if te else 'local'}]"
    )  # which layers ran: Transformer Engine's once it is installed for this interpreter (by hand or on first need)
    cluster = _given(values.get("cluster")) or CLUSTERS[gpu]
    per_node = min(gpus, GPUS_PER_NODE)
    seq = _given(values.get("seq_length"))
    return RowPlan(
        key=RowKey(row=row, label=label, gpu=gpu, size=str(values["model"]), gpus=gpus, measured_s=measured_s(values)),
        script=script,
        args=tuple(args),
        hardware=HARDWARE[gpu],
        cluster=cluster,
        nnodes=math.ceil(gpus / per_node),
        per_node=per_node,
        iterations=STEPS,
        assumptions=(
            *((TE_ASSUMPTION,) if te else (ASSUMPTION, *([WITHOUT_SP] if _sequence_parallel(values) else []))),
            *exchange,
        ),
        seq=int(float(seq)) if seq else None,
        env=tuple(sorted(ENV.items())),
        sources=script.parent / "megatron",
    )


def predict(plan: RowPlan, run_dir: Path, version: str, warehouse: Path | None) -> Predicted:
    """The steady iteration of the row's trace on its GPUs and cluster, with its 10-90% band, MFU and HFU."""
    return predict_plan(plan, run_dir, version, warehouse)
