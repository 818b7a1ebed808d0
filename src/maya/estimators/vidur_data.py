"""Vidur's measured operators and NCCL collectives (`data/vidur/`, MIT): row schemas, quarantine, and the
operators as measured calls.

Vidur (Agrawal et al., MLSys 2024) timed the operators of one Llama-style layer in fp16 forward passes
(inference: vLLM's kernels through sarathi-serve), for each model's own sizes, `num_tokens` rows and
tensor-parallel shard `tp`. A time is the Kineto (CUPTI) device time of the kernels launched inside a
`record_function` range around the operator: `timing = device`, unlike NeuSight's calls timed one by one
(`isolated`). Repeated measurements of one shape (two sweeps measured 2,048 and 4,096 tokens) are
repeats, kept as such: the lookup takes their median, training sees both.

How each operator maps to the calls traced kernels are priced as (family / op, with the columns the
simulator fills from a trace, `maya.simulator.work`), and what a training step launches instead:

| Vidur op | kernel(s) measured | call | eager training step | where it does not match |
|---|---|---|---|---|
| `attn_pre_proj`, `attn_post_proj`, `mlp_up_proj`, `mlp_down_proj` | one cuBLAS GEMM (`F.linear`; with its bias epilogue where the model has a bias) | gemm / `mm` in the call frame's convention (`calls.gemm_of_row_major`, as the emulator records cuBLAS): m = output features (`gemm_n`), n = tokens (`gemm_m`), k = `gemm_k` | the same forward GEMM (bf16 or fp16); its backward runs two more GEMMs per linear (input gradient: m = input features, n = tokens, k = output features; weight gradient: m = input features, n = output features, k = tokens) | backward shapes are priced by the same model from their own sizes; no backward GEMM was measured |
| `input_layernorm`, `post_attention_layernorm` (RMSNorm) | vLLM's fused `rms_norm` kernel (one block per token, the row read twice) | normalization / `vllm_rms_norm` (numel = tokens x hidden, row = hidden): no traced op runs this kernel | `nn.RMSNorm` runs torch's fused kernel (`aten::_fused_rms_norm`), torch's vectorized layer-norm kernel with the mean left out, which the family prices as `native_layer_norm` (`NormalizationPredictor.same_kernel`) | a different kernel for the same work: vLLM's reaches 33% of the H100's bandwidth (1,100 GB/s at 2,048+ tokens), torch's layer norm 59% (phi-2), 34% / 47% on the A100, 60% / 61% on the A40; the rows teach the family how row kernels scale, not torch's RMSNorm; the backward is not measured |
| `input_layernorm` (LayerNorm: `LAYER_NORM_MODELS`) | torch's `native_layer_norm` | normalization / `native_layer_norm` | the same kernel | backward not measured |
| `attn_rope` | vLLM's `rotary_embedding`: one kernel rotating q and k in place | elementwise / `rotary_embedding` (numel = tokens x (q + kv heads) x head_dim, read and written once) | Llama-style eager code runs 4-6 kernels per tensor (`mul`, `neg`, `cat`, `mul`, `add`), which are priced as those ops; Inductor fuses them into one or two Triton kernels like this one | no traced op carries this name: the rows teach the elementwise family's bandwidth efficiency only |
| `mlp_act` (gated MLP) | vLLM's `silu_and_mul`: one kernel, reads 2 x ffn, writes ffn per token | elementwise / `silu_and_mul` (numel = tokens x ffn / tp, two operands) | eager runs two kernels, `silu` (one operand) then `mul` (two), and three in the backward; Inductor fuses `silu(a) * b` into one kernel like this one | as for `attn_rope`: not the eager kernels, one op of the family's efficiency |
| `mlp_act` (GELU MLP) | torch's `gelu` kernel | elementwise / `gelu` (numel = tokens x ffn / tp) | the same kernel | backward (`gelu_backward`) not measured |
| `add` (models with a post-attention norm) | torch's `add`: the residual add | elementwise / `add` (numel = tokens x hidden, two operands) | the same kernel (residual adds, forward and backward gradient sums) | - |
| `add` (models without one, phi-2's parallel block) | two `add` kernels in one range (`attn + mlp + residual`) | left out | - | two kernels' time in one measurement: not one call |
| `emb` | `F.embedding`: one gather of `num_tokens` rows of the vocab-parallel table | embedding / `embedding` (numel = tokens x hidden, row = hidden) | torch's forward embedding: `aten::embedding` → `index_select` → `gather`, one `vectorized_gather_kernel`, an embedding call sized by the rows it gathers (`calls.gathered_size`), as these rows | the table size (vocabulary / tp) is not a call-frame column; the backward (`embedding_dense_backward`) is not measured |

Collectives (`collectives.parquet`) are loaded as data for the collective model (`collective_frame`): one
row per measurement with the collective's Maya name, bytes per GPU, GPUs and nodes taking part.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pandera.pandas as pa

from maya.core import hardware
from maya.core.paths import data_dir
from maya_trace_spec.vocabulary import DTYPE_BYTES

from .calls import gemm_of_row_major
from .collective_data import duplicate_curves
from .collectives import PRICED_COLLECTIVES, priced_name
from .launch_floor import DEVICE
from .row_validation import split_valid

SOURCE = "vidur"
GEMM_OPS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")
NORM_OPS = ("input_layernorm", "post_attention_layernorm")
ROW_OPS = (*NORM_OPS, "attn_rope", "mlp_act", "add", "emb")
OPS = GEMM_OPS + ROW_OPS
"""Every operator Vidur's compute profiles hold."""
LAYER_NORM_MODELS = ("microsoft/phi-2",)
"""Models whose norm is LayerNorm (Vidur's model configs); every other model's is RMSNorm. The rows do not
say which norm ran."""
COMPUTE_COLUMNS = (
    "device",
    "model",
    "op",
    "time_ms_median",
    "num_tokens",
    "tp",
    "n_head",
    "n_kv_head",
    "n_embd",
    "n_expanded_embd",
    "use_gated_mlp",
    "gemm_m",
    "gemm_n",
    "gemm_k",
    "dtype",
)
"""What a Vidur compute file needs (its other columns, the min/max/mean/std times and `vocab_size`, are kept
but not read)."""
COLLECTIVE_COLUMNS = (
    "network",
    "collective",
    "num_workers",
    "devices_per_node",
    "max_devices_per_node",
    "size_elements",
    "dtype",
    "time_ms_median",
)
SIZE_COLUMNS = ("num_tokens", "tp", "n_head", "n_kv_head", "n_embd", "n_expanded_embd")
TWO_KERNEL_ADD = "add of a parallel block (no post-attention norm): two add kernels in one measurement"


class VidurFormatError(ValueError):
    """The file is not in Vidur's layout (a column is missing or of an unusable type)."""


@dataclass(frozen=True)
class Checked:
    """A Vidur file's rows split three ways."""

    calls: pd.DataFrame
    """Valid rows as measured calls (call-frame columns, `measured_ns`, `source`, `timing`, `row_index`, and for
    compute `model`, `vidur_op`, `tp`, `num_tokens`; for collectives the collective model's columns)."""
    rejected: pd.DataFrame
    """Bad rows (`row_index`, `reason` and the row's own columns): quarantined, never trained on."""
    left_out: dict[str, int] = field(default_factory=dict)
    """Valid rows that are not one kernel call, counted by kind."""


def vidur_dir() -> Path:
    return data_dir() / "vidur"


def _resolves(device: str) -> bool:
    try:
        hardware.get(device)
    except hardware.UnknownHardware:
        return False
    return True


def _positive(name: str, nullable: bool = False) -> pa.Column:
    checks = [pa.Check.gt(0, error="not positive"), pa.Check(np.isfinite, element_wise=False, error="not finite")]
    return pa.Column("float64", checks, nullable=nullable, coerce=False)


WHOLE_LIMIT = 2.0**53
"""Counts and sizes are whole numbers below this (exact in float64, and in int64 once stored)."""


def _count(name: str, nullable: bool = False) -> pa.Column:
    """A positive whole number: tokens, heads, GPUs, sizes (2.5 GPUs or 1e300 tokens are not measurements)."""
    whole = pa.Check(
        lambda s: (s == np.floor(s)) & (s < WHOLE_LIMIT), element_wise=False, error="not a whole number below 2**53"
    )
    column = _positive(name, nullable)
    return column.set_checks([*column.checks, whole])


def _gemm_sizes_given(frame: pd.DataFrame) -> pd.Series:
    return ~frame["op"].isin(GEMM_OPS) | frame[["gemm_m", "gemm_n", "gemm_k"]].notna().all(axis=1)


COMPUTE_SCHEMA = pa.DataFrameSchema(
    {
        "device": pa.Column(
            str,
            pa.Check(lambda s: s.isin([d for d in s.unique() if _resolves(d)]), error="not in the hardware catalog"),
        ),
        "model": pa.Column(str),
        "op": pa.Column(str, pa.Check.isin(OPS, error=f"not a Vidur operator ({', '.join(OPS)})")),
        "time_ms_median": _positive("time_ms_median"),
        **{name: _count(name) for name in SIZE_COLUMNS},
        "use_gated_mlp": pa.Column(bool),
        **{name: _count(name, nullable=True) for name in ("gemm_m", "gemm_n", "gemm_k")},
        "dtype": pa.Column(str, pa.Check.isin(list(DTYPE_BYTES), error="not a known dtype")),
    },
    checks=[pa.Check(_gemm_sizes_given, error="gemm_m, gemm_n, gemm_k: missing for a GEMM operator")],
)
"""A compute row the estimators can use: its device in the catalog, a known operator and dtype, a finite
positive median time and positive whole sizes (GEMMs with their m, n, k)."""


COLLECTIVE_SCHEMA = pa.DataFrameSchema(
    {
        "network": pa.Column(str, pa.Check.str_length(min_value=1, error="empty")),
        "collective": pa.Column(
            str,
            pa.Check(lambda s: s.map(priced_name).notna(), error=f"not a collective ({', '.join(PRICED_COLLECTIVES)})"),
        ),
        **{name: _count(name) for name in ("num_workers", "devices_per_node", "max_devices_per_node", "size_elements")},
        "time_ms_median": _positive("time_ms_median"),
        "dtype": pa.Column(str, pa.Check.isin(list(DTYPE_BYTES), error="not a known dtype")),
    },
    checks=[
        pa.Check(
            lambda f: f["devices_per_node"] <= f["max_devices_per_node"],
            error="devices_per_node: more than the node's max_devices_per_node",
        ),
        pa.Check(lambda f: f["devices_per_node"] <= f["num_workers"], error="devices_per_node: more than num_workers"),
    ],
)
"""A collective row: a known collective and dtype, a finite positive median time, positive whole counts and
size that fit the node."""


def detect_layout(columns) -> str:
    """`neusight`, `vidur_compute` or `vidur_collectives` from a file's column names; `VidurFormatError`
    naming what each layout needs otherwise."""
    names = set(columns)
    layouts = {
        "vidur_collectives": COLLECTIVE_COLUMNS,
        "vidur_compute": COMPUTE_COLUMNS,
        "neusight": ("op", "device", "latency_ms"),
    }
    for layout, needed in layouts.items():
        if set(needed) <= names:
            return layout
    missing = {layout: [c for c in needed if c not in names] for layout, needed in layouts.items()}
    closest = min(missing, key=lambda layout: len(missing[layout]) / len(layouts[layout]))
    wanted = "; ".join(f"{layout}: {', '.join(needed)}" for layout, needed in layouts.items())
    raise VidurFormatError(
        f"not a measurement layout Maya reads: closest is {closest}, missing column(s) "
        f"{', '.join(missing[closest])} (layouts and their columns: {wanted})"
    )


def check_compute(raw: pd.DataFrame) -> Checked:
    """Vidur compute rows validated (`COMPUTE_SCHEMA`) and mapped to measured calls (module docstring)."""
    frame = _typed(raw, COMPUTE_COLUMNS, (*SIZE_COLUMNS, "time_ms_median", "gemm_m", "gemm_n", "gemm_k"))
    valid, rejected = split_valid(frame, COMPUTE_SCHEMA)
    with_norm = pd.MultiIndex.from_frame(frame.loc[frame["op"] == "post_attention_layernorm", ["device", "model"]])
    parallel = ~pd.MultiIndex.from_frame(valid[["device", "model"]]).isin(with_norm)
    two_adds = (valid["op"] == "add").to_numpy() & parallel  # the model has no post-attention norm on the device
    left_out = {TWO_KERNEL_ADD: int(two_adds.sum())} if two_adds.any() else {}
    return Checked(_compute_calls(valid[~two_adds]), rejected, left_out)


def _compute_calls(rows: pd.DataFrame) -> pd.DataFrame:
    op = rows["op"].to_numpy()
    tokens, tp, embd = (rows[c].to_numpy() for c in ("num_tokens", "tp", "n_embd"))
    head_dim = embd / rows["n_head"].to_numpy()
    ffn = rows["n_expanded_embd"].to_numpy() / tp
    gemm, norm = np.isin(op, GEMM_OPS), np.isin(op, NORM_OPS)
    layer_norm = rows["model"].isin(LAYER_NORM_MODELS).to_numpy()
    gated = rows["use_gated_mlp"].to_numpy(dtype=bool)
    rotated = (rows["n_head"].to_numpy() + rows["n_kv_head"].to_numpy()) / tp * head_dim
    family = np.select([gemm, norm, op == "emb"], ["gemm", "normalization", "embedding"], "elementwise")
    name = np.select(
        [gemm, norm & layer_norm, norm, op == "attn_rope", (op == "mlp_act") & gated, op == "mlp_act", op == "add"],
        ["mm", "native_layer_norm", "vllm_rms_norm", "rotary_embedding", "silu_and_mul", "gelu", "add"],
        "embedding",
    )
    row = np.select([op == "mlp_act", op == "attn_rope"], [ffn, head_dim], embd)
    numel = np.select([op == "mlp_act", op == "attn_rope"], [tokens * ffn, tokens * rotated], tokens * embd)
    operands = np.where((op == "add") | ((op == "mlp_act") & gated), 2.0, 1.0)
    # Vidur's gemm_m, gemm_n are the row-major output's [tokens, output features]
    batch, m, n, k = gemm_of_row_major(
        1.0, *(rows[c].to_numpy(dtype="float64") for c in ("gemm_m", "gemm_n", "gemm_k"))
    )
    return pd.DataFrame(
        {
            "hardware": rows["device"].to_numpy(),
            "family": family,
            "op": name,
            "dtype": rows["dtype"].to_numpy(),
            "batch": np.where(gemm, batch, np.nan),
            "m": np.where(gemm, m, np.nan),
            "n": np.where(gemm, n, np.nan),
            "k": np.where(gemm, k, np.nan),
            "numel": np.where(gemm, np.nan, numel),
            "row": np.where(gemm, np.nan, row),
            "operands": np.where(gemm, np.nan, operands),
            "measured_ns": rows["time_ms_median"].to_numpy() * 1e6,
            "source": SOURCE,
            "timing": DEVICE,
            "row_index": rows["row_index"].to_numpy(),
            "model": rows["model"].to_numpy(),
            "vidur_op": op,
            "tp": tp,
            "num_tokens": tokens,
        }
    )


def check_collectives(raw: pd.DataFrame) -> Checked:
    """Vidur collective rows validated (`COLLECTIVE_SCHEMA`) as the collective model's frame: `network`,
    `collective` (Maya's name), `bytes` per GPU, `ranks`, `nodes`, `devices_per_node`, `measured_ns`.
    Vidur's profiler records the message size in bytes (`collective_data`), whatever the column's name.
    A curve that repeats another network's measurements value for value is quarantined: a copy, not a
    measurement (Vidur's H100 pairwise send/recv is its A100 one)."""
    frame = _typed(
        raw,
        COLLECTIVE_COLUMNS,
        ("num_workers", "devices_per_node", "max_devices_per_node", "size_elements", "time_ms_median"),
    )
    valid, rejected = split_valid(frame, COLLECTIVE_SCHEMA)
    ranks = valid["num_workers"].to_numpy()
    calls = pd.DataFrame(
        {
            "network": valid["network"].to_numpy(),
            "collective": valid["collective"].map(priced_name).to_numpy(),
            "bytes": valid["size_elements"].to_numpy(dtype="float64"),
            "ranks": ranks.astype("int64"),
            "nodes": np.ceil(ranks / valid["devices_per_node"].to_numpy()).astype("int64"),
            "devices_per_node": valid["devices_per_node"].to_numpy().astype("int64"),
            "measured_ns": valid["time_ms_median"].to_numpy() * 1e6,
            "source": SOURCE,
            "row_index": valid["row_index"].to_numpy(),
        }
    )
    copies = duplicate_curves(calls.assign(per_node=calls["devices_per_node"], measured_us=calls["measured_ns"] / 1e3))
    copied = copies.notna().to_numpy()
    if copied.any():
        rejected = pd.concat(
            [
                rejected,
                valid[copied].assign(
                    reason="repeats the measurements of network "
                    + copies[copied].astype(str)
                    + " value for value: a copy, not a measurement"
                ),
            ],
            ignore_index=True,
        )
    return Checked(calls[~copied].reset_index(drop=True), rejected)


def _typed(raw: pd.DataFrame, needed: tuple[str, ...], numeric: tuple[str, ...]) -> pd.DataFrame:
    """The needed columns with a `row_index`; numeric ones as float64 (a value that is not a number becomes
    missing, and the schema rejects its row), text ones as text."""
    missing = [c for c in needed if c not in raw.columns]
    if missing:
        raise VidurFormatError(f"missing column(s) {', '.join(missing)}: not Vidur's layout")
    frame = pd.DataFrame({"row_index": np.arange(len(raw), dtype="int64")}, index=pd.RangeIndex(len(raw)))
    for name in needed:
        column = raw[name].reset_index(drop=True)
        if name in numeric:
            if pd.api.types.is_bool_dtype(column):
                raise VidurFormatError(f"column {name} is boolean, not a number")
            frame[name] = pd.to_numeric(column, errors="coerce").astype("float64")
        elif name == "use_gated_mlp":
            if not pd.api.types.is_bool_dtype(column):
                raise VidurFormatError(f"column {name} is {column.dtype}, not boolean")
            frame[name] = column.astype(bool)
        else:
            frame[name] = column.astype("str").where(column.notna(), "")
    return frame


def load_compute(path: str | Path | None = None) -> Checked:
    """A Vidur compute file (default the shipped `compute.parquet`) checked and mapped."""
    return check_compute(pd.read_parquet(path or vidur_dir() / "compute.parquet"))


def load_collectives(path: str | Path | None = None) -> Checked:
    """A Vidur collectives file (default the shipped `collectives.parquet`) checked."""
    return check_collectives(pd.read_parquet(path or vidur_dir() / "collectives.parquet"))
