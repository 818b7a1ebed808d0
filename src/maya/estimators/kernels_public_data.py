"""Public kernel measurements (`data/kernels_public/`: attention, GEMM and sustained-GEMM rows copied from public
repositories, each row with its repository, commit, date and licence): the row schema, the quarantine and the
attention rows as measured calls.

A file's rows are validated with pandera (`SCHEMA`); a row is quarantined with its reason when it is no
measurement (`status` OOM, context rows of spec arithmetic, a row with no time), when its GPU is not one Maya
knows (`DEVICES`: the catalog's parts, and the TritonBench machines as a device of their own), when its dtype
is not one element type, or when its provenance is missing. Nothing is dropped silently.

The TritonBench rows were timed on Meta's "H100" machines (96 GB HBM2e at 500 W, or an H100 PCIe: not the
700 W SXM5, `attention/README.md` section 2): they are kept as the device `OWN_DEVICE`, which no spec sheet
describes, and serve for backward / forward and implementation ratios, never as an H100 SXM's times.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pandera.pandas as pa

from maya.core.paths import data_dir
from maya_trace_spec.vocabulary import DTYPE_BYTES

from .row_validation import split_valid

SOURCE = "kernels-public"
FILES = (
    "attention/flash_attention_figures.csv",
    "attention/tritonbench_commit_messages.csv",
    "gemm/gemm_measurements.csv",
    "sustained_gemm/peak_vs_sustained_gemm.csv",
)
"""The shipped files, relative to `kernels_public_dir()`."""
OWN_DEVICE = "h100-meta"
"""TritonBench's and pytorch/benchmark's "H100" (Meta's machines): H100-class, power- and bandwidth-reduced."""
DEVICES: tuple[tuple[str, str | None], ...] = (
    (r"^H100 \((Meta|TritonBench CI)", OWN_DEVICE),
    (r"variant not stated|model not stated|^GH200", None),
    (r"^H800", "h800"),
    (r"^H200", "h200"),
    (r"^H100", "h100-sxm"),
    (r"^A100-PCIE-40GB", "a100-pcie-40gb"),
    (r"^A100", "a100-sxm-80gb"),
)
"""A row's `gpu` as published -> the device it was measured on, first match wins (None: not known well enough:
the SKU is not stated, or the part is not in the hardware catalog). Every unqualified "H100" the files name is
an SXM5 by its README (80 GB HBM3, or "SXM presumed"); A100 SXM4 40 GB and 80 GB share SMs and clocks."""
DIRECTIONS = ("fwd", "bwd", "fwd+bwd", "gemm")
COLUMNS = (
    "row_id",
    "dataset",
    "source_id",
    "source_repo",
    "source_commit",
    "source_date",
    "licence",
    "gpu",
    "kernel_impl",
    "dtype",
    "causal",
    "head_dim",
    "n_heads",
    "batch",
    "seqlen",
    "m",
    "n",
    "k",
    "groups",
    "direction",
    "time_s",
    "flops",
    "status",
)
"""What a kernels_public file needs (see its README for the rest, which is kept but not read)."""
NUMERIC = ("head_dim", "n_heads", "batch", "seqlen", "m", "n", "k", "groups", "time_s", "flops")


class KernelsPublicFormatError(ValueError):
    """The file is not in the kernels_public layout."""


@dataclass(frozen=True)
class Checked:
    """A file's rows: valid (with `device`, the element type `dtype_name` and the position in the file
    `row_index`) and quarantined (with `reason` and `row_index`)."""

    rows: pd.DataFrame
    rejected: pd.DataFrame


def kernels_public_dir() -> Path:
    return data_dir() / "kernels_public"


def device_of(gpu: str) -> str | None:
    """The device a row's published `gpu` names (`DEVICES`), None when unknown."""
    for pattern, device in DEVICES:
        if re.search(pattern, gpu):
            return device
    return None


def dtype_of(text: str) -> str | None:
    """The element type of a row's published `dtype` ("fp16 (script default; ...)" -> fp16, "fp32 via cuBLASLt
    (TF32 ...)" -> tf32, fp8 variants -> fp8); None for none or more than one ("bf16 and fp8")."""
    lower = text.lower()
    if lower.startswith("fp32 via"):
        return "tf32"
    found = {name for name in DTYPE_BYTES if re.match(rf"{name}\b", lower)}
    if " and " in lower.split("(")[0] or len(found) != 1:
        return None
    return found.pop()


def _positive(nullable: bool = False) -> pa.Column:
    checks = [pa.Check.gt(0, error="not positive"), pa.Check(np.isfinite, element_wise=False, error="not finite")]
    return pa.Column("float64", checks, nullable=nullable)


def _given(column: str) -> pa.Column:
    return pa.Column(str, pa.Check.str_length(min_value=1, error="missing"), nullable=False, title=column)


SCHEMA = pa.DataFrameSchema(
    {
        "status": pa.Column(str, pa.Check.isin(["ok"], error="not a measurement (status other than ok)")),
        "device": pa.Column(str, nullable=False, checks=pa.Check.str_length(min_value=1, error="unknown GPU")),
        "dtype_name": pa.Column(str, pa.Check.isin(list(DTYPE_BYTES), error="not one element type")),
        "direction": pa.Column(str, pa.Check.isin(DIRECTIONS, error=f"not one of {', '.join(DIRECTIONS)}")),
        "time_s": _positive(),
        "flops": _positive(),
        **{name: _given(name) for name in ("source_repo", "source_commit", "licence", "kernel_impl")},
    },
    checks=[
        pa.Check(
            lambda f: (f["direction"] == "gemm") | f[["seqlen", "head_dim", "n_heads", "batch"]].gt(0).all(axis=1),
            error="seqlen, head_dim, n_heads, batch: missing for an attention row",
        )
    ],
)
"""A row Maya can compare with: a measurement (`status` ok) on a known device, in one element type, with a
finite positive time and FLOP count, attention rows with their shape, and its provenance."""


def read(data: bytes, name: str = "") -> Checked:
    """A kernels_public CSV's bytes as valid and quarantined rows; `KernelsPublicFormatError` when it is not that
    layout (`name` names the file in the message)."""
    try:
        raw = pd.read_csv(io.BytesIO(data), dtype=str, keep_default_na=False)
    except (ValueError, UnicodeDecodeError, pd.errors.ParserError) as e:
        raise KernelsPublicFormatError(f"{name or 'file'}: not a readable CSV ({e})") from None
    missing = [c for c in COLUMNS if c not in raw.columns]
    if missing:
        raise KernelsPublicFormatError(f"{name or 'file'}: missing column(s) {', '.join(missing)}")
    frame = raw.assign(row_index=np.arange(len(raw)))  # the row's position in the file, for the quarantine
    for column in NUMERIC:
        frame[column] = pd.to_numeric(frame[column].replace("", np.nan), errors="coerce").astype("float64")
    frame["device"] = frame["gpu"].map(lambda g: device_of(g) or "")
    frame["dtype_name"] = frame["dtype"].map(lambda d: dtype_of(d) or "")
    frame["causal"] = frame["causal"].str.lower().eq("yes")
    valid, rejected = split_valid(frame, SCHEMA)
    return Checked(valid, rejected)


def load(path: Path | None = None) -> Checked:
    """One shipped file (or every one, `path` None) validated."""
    paths = [path] if path is not None else [kernels_public_dir() / f for f in FILES]
    checked = [read(p.read_bytes(), p.name) for p in paths]
    return Checked(
        pd.concat([c.rows for c in checked], ignore_index=True),
        pd.concat([c.rejected for c in checked], ignore_index=True),
    )


FUSED_KERNELS: dict[str, str] = {
    "FlashAttention-2": "flash",
    "FlashAttention": "flash1",
    "xformers": "efficient",
    "sdpa": "torchflash",
    "flash_v2": "flash",
    "flex_attention": "flex",
}
"""A fused implementation measured -> the call-frame kernel that runs it (FlashAttention v1, `flash1`, is the
kernel the `lftriton` calls are priced from, `attention_model`); the others (OpenAI-Triton's 2023 kernel, FlashAttention-3,
ThunderKittens, ...) are not a kernel a traced call is priced as."""
EAGER = "Pytorch"
"""Eager attention (baddbmm, causal mask add, softmax, einsum; autograd backward): Maya's own kernels."""


def measured_calls(rows: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, int]]:
    """The calls each valid row timed, in the call frame (column `measurement`: the row's position in `rows`; a row's
    time is the sum of its calls' device times), and the rows that no call frame describes, counted by why."""
    calls, left_out = [], {}
    for position, row in enumerate(rows.itertuples(index=False)):
        made = _row_calls(row)
        if isinstance(made, str):
            left_out[made] = left_out.get(made, 0) + 1
            continue
        calls.extend({**c, "measurement": position, "hardware": row.device, "dtype": row.dtype_name} for c in made)
    frame = pd.DataFrame(calls)
    return frame.assign(source=SOURCE, timing="device") if len(frame) else frame, left_out


def _row_calls(row) -> list[dict] | str:
    if row.device == OWN_DEVICE:
        return f"measured on {OWN_DEVICE} (TritonBench's H100-class machines, no spec sheet): ratios only"
    if row.direction == "gemm":
        groups = row.groups if row.groups == row.groups else 1.0
        batch, m, n, k = (groups, row.n, row.m, row.k)  # calls.gemm_of_row_major(groups, M, N, K)
        if not all(v == v and v > 0 for v in (m, n, k)):
            return "GEMM without m, n, k"
        return [{"family": "gemm", "op": "mm" if batch == 1 else "bmm", "batch": batch, "m": m, "n": n, "k": k}]
    directions = ("fwd", "bwd") if row.direction == "fwd+bwd" else (row.direction,)
    heads, s, d = row.batch * row.n_heads, row.seqlen, row.head_dim
    if row.kernel_impl == EAGER:
        return [c for direction in directions for c in _eager(direction, heads, s, d, bool(row.causal))]
    kernel = FUSED_KERNELS.get(row.kernel_impl)
    if kernel is None:
        return f"{row.kernel_impl}: no traced kernel is priced as this implementation"
    shape = {"family": "attention", "batch": heads, "m": s, "n": s, "k": d}
    suffix = "_causal" if row.causal else ""
    out = [{**shape, "op": f"{kernel}_{direction}{suffix}"} for direction in directions]
    if "bwd" in directions and kernel in ("flash", "torchflash", "flash1", "lftriton"):
        out += [{**shape, "op": f"{kernel}_bwd_{part}"} for part in ("preprocess", "postprocess")]
    return out


def _eager(direction: str, heads: float, s: float, d: float, causal: bool) -> list[dict]:
    """The kernels of FlashAttention-2's benchmark's eager attention: forward QK^T (baddbmm), the causal mask's
    add, softmax, PV (einsum); backward the softmax's and four products."""

    def bmm(rows_: float, cols: float, reduction: float) -> dict:
        return {"family": "gemm", "op": "bmm", "batch": heads, "m": cols, "n": rows_, "k": reduction}

    scores = {"numel": heads * s * s, "row": s}
    if direction == "fwd":
        mask = [{"family": "elementwise", "op": "add", "operands": 2.0, **scores}] if causal else []
        return [bmm(s, s, d), *mask, {"family": "softmax", "op": "softmax", **scores}, bmm(s, d, s)]
    return [
        bmm(s, s, d),  # dP = dO V^T
        bmm(s, d, s),  # dV = P^T dO
        {"family": "softmax", "op": "softmax_bwd", "operands": 2.0, **scores},
        bmm(s, d, s),  # dQ = dS K
        bmm(s, d, s),  # dK = dS^T Q
    ]
