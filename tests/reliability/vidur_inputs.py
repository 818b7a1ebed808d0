"""Vidur's measurement layouts (`data/vidur/`) as the pipelines read them and as `maya estimators eval
--dataset` reads them: generated Parquet files of compute operator rows (`vidur_data.COMPUTE_SCHEMA`) and of
NCCL collective rows (`COLLECTIVE_SCHEMA`) — columns missing or of other types, values outside every range
(fractional, huge, negative, non-finite counts), unknown devices, operators, collectives and networks, pandas
metadata, bytes flipped.

- Compute files go through `profile_readers.read_profile` (format `vidur_compute`), `profile_schema.split_valid`
  and the quarantine records of `defs/profiles.py`: refused with a `ProfileFileError`, or every row of the
  partition's device accounted for (a call, a rejected row with its reason, or a row left out by kind), and
  every call's time the file's `time_ms_median` of the row it names.
- Collective files go through `defs/collectives._validate_file`, which never raises: one quarantine row for a
  file it cannot read, otherwise every row of the partition's network valid or quarantined with a reason, and
  every valid row's counts whole numbers as the file holds them.
- `maya estimators eval --dataset` prints its table or one error line (compute rows against a small trained
  estimator; collective rows against each network's cluster, no estimator needed)."""

from __future__ import annotations

import io
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import strategies as st
from reliability.dataset_inputs import EvalFailed, arrow_table, check_profile, flipped_parquet, run_eval
from reliability.harness import Corrupt, Surface

from maya.estimators.collectives import PRICED_COLLECTIVES
from maya.estimators.vidur_data import OPS
from maya.pipelines.profile_readers import ProfileFileError
from maya.pipelines.sources import VIDUR_COLLECTIVES, VIDUR_COMPUTE, NetworkPartition, Partition, catalog_name
from maya_trace_spec.vocabulary import DTYPE_BYTES, KERNEL_FAMILIES

DEVICES = [
    "NVIDIA A100-SXM4-80GB",
    "NVIDIA A40",
    "NVIDIA H100 80GB HBM3",
    "NVIDIA H100 80GB HBM3",
    "Tesla T4",
    "h100-sxm",
    "Some GPU",
    "",
]
MODELS = ["meta-llama/Llama-2-7b-hf", "meta-llama/Meta-Llama-3-70B", "microsoft/phi-2", "Qwen/Qwen-72B", "x"]
NETWORKS = [
    "a100_dgx",
    "a100_pairwise_nvlink",
    "a40_pairwise_nvlink",
    "h100_pairwise_nvlink",
    "h100_pairwise_nvlink",
    "tpu_pod",
    "",
]
DTYPES = ["fp16", "fp16", "bf16", "fp32", "u8"]
counts = st.sampled_from([1, 2, 4, 8, 16, 32])
sizes = st.one_of(counts, st.integers(1, 1 << 16), st.sampled_from([128, 4096, 8192, 11008, 28672]))
times = st.one_of(st.floats(1e-4, 100.0), st.sampled_from([0.012, 0.1, 1.5]))
COMPUTE_COLUMNS = {
    "device": st.sampled_from(DEVICES),
    "model": st.sampled_from(MODELS),
    "op": st.sampled_from([*OPS, *OPS[:4], "mlp_gate", ""]),
    "time_ms_median": times,
    "num_tokens": sizes,
    "tp": st.sampled_from([1, 1, 2, 4, 8]),
    "n_head": st.sampled_from([32, 64, 8]),
    "n_kv_head": st.sampled_from([8, 32, 64]),
    "n_embd": st.sampled_from([2560, 4096, 8192]),
    "n_expanded_embd": st.sampled_from([10240, 11008, 28672]),
    "use_gated_mlp": st.booleans(),
    "gemm_m": st.one_of(sizes, st.none()),
    "gemm_n": st.one_of(sizes, st.none()),
    "gemm_k": st.one_of(sizes, st.none()),
    "dtype": st.sampled_from(DTYPES),
    "time_ms_min": times,
    "vocab_size": st.sampled_from([32000, 152064]),
    "source": st.just("vidur"),
}
COLLECTIVE_COLUMNS = {
    "network": st.sampled_from(NETWORKS),
    "collective": st.sampled_from(
        ["all_reduce", "all_reduce", "send_recv", "allgather", "reduce_scatter", "broadcast", "gossip", ""]
    ),
    "num_workers": st.sampled_from([1, 2, 2, 4, 4, 8, 16, 64]),
    "devices_per_node": st.sampled_from([1, 2, 4, 8]),
    "max_devices_per_node": st.sampled_from([8, 4, 2]),
    "size_elements": st.one_of(sizes, st.integers(1, 1 << 30)),
    "dtype": st.sampled_from(DTYPES),
    "time_ms_median": times,
    "time_ms_mean": times,
}
odd_numbers = st.one_of(
    st.integers(-(1 << 62), 1 << 62),
    st.sampled_from([0, -1, 0.5, 1.5, 2.5, 1e300, 2.0**63]),
    st.floats(allow_nan=True, allow_infinity=True),
)
junk = st.one_of(st.text(max_size=5), odd_numbers, st.booleans(), st.none())
LAYOUTS = {VIDUR_COMPUTE: COMPUTE_COLUMNS, VIDUR_COLLECTIVES: COLLECTIVE_COLUMNS}


@dataclass(frozen=True)
class VidurInput:
    format: str
    table: dict[str, tuple[Any, ...]]
    pandas: bool
    """Written from a pandas frame (with pandas metadata, which flipped bytes can damage)."""
    flips: tuple[tuple[int, int], ...]
    partition: str
    """The partition's hardware (compute) or network (collectives)."""

    def parquet(self) -> bytes:
        table = arrow_table(self.table)
        if self.pandas:
            table = pa.Table.from_pandas(table.to_pandas(), preserve_index=True)
        return flipped_parquet(table, self.flips)


@st.composite
def _compute_row(draw) -> dict:
    row = {name: draw(good) for name, good in COMPUTE_COLUMNS.items()}
    if row["op"] in OPS[:4] and draw(st.integers(0, 5)):  # a GEMM with its sizes, as Vidur's are
        row.update(gemm_m=row["num_tokens"], gemm_n=row["n_embd"] // row["tp"], gemm_k=row["n_embd"])
    return row


@st.composite
def _collective_row(draw) -> dict:
    row = {name: draw(good) for name, good in COLLECTIVE_COLUMNS.items()}
    if draw(st.integers(0, 3)):  # GPUs that fit the node, as Vidur's do
        row["max_devices_per_node"] = 8
        row["devices_per_node"] = min(row["devices_per_node"], row["num_workers"])
    return row


@st.composite
def vidur_inputs(draw, fmt: str | None = None) -> VidurInput:
    """A file in one of Vidur's layouts (or `fmt`): good rows with a few odd cells, a column missing or
    retyped now and then, or junk throughout; its partition mostly one the file has rows of."""
    fmt = fmt or draw(st.sampled_from(list(LAYOUTS)))
    spec = LAYOUTS[fmt]
    rows = [draw(_compute_row() if fmt == VIDUR_COMPUTE else _collective_row()) for _ in range(draw(st.integers(0, 8)))]
    mode = draw(st.sampled_from(["clean", "clean", "plain", "plain", "junk"]))
    odds = {"clean": 40, "plain": 8, "junk": 1}[mode]  # good cells per odd one
    table = {}
    for name in spec:
        if mode != "clean" and draw(st.integers(0, 29 if mode == "plain" else 9)) == 0:
            continue  # a missing column
        table[name] = tuple(row[name] if draw(st.integers(0, odds)) else draw(junk) for row in rows)
    if draw(st.integers(0, 5)) == 0:
        table[draw(st.text(max_size=4))] = tuple(draw(st.lists(junk, min_size=len(rows), max_size=len(rows))))
    flips = tuple(
        draw(st.lists(st.tuples(st.integers(0, 1 << 14), st.integers(0, 255)), min_size=1, max_size=2))
        if draw(st.integers(0, 7)) == 0
        else ()
    )
    key = "device" if fmt == VIDUR_COMPUTE else "network"
    named = [catalog_name(r[key]) if fmt == VIDUR_COMPUTE else r[key] for r in rows]
    others = ["a100-sxm-80gb", "a40", "h100-sxm", "t4"] if fmt == VIDUR_COMPUTE else NETWORKS
    partition = draw(st.sampled_from(named)) if named and draw(st.integers(0, 4)) else draw(st.sampled_from(others))
    return VidurInput(fmt, table, draw(st.integers(0, 3)) == 0, flips, partition)


def _file_rows(raw: bytes) -> pd.DataFrame:
    """The file as the test reads it (independently of the reader under test)."""
    return pq.read_table(io.BytesIO(raw)).to_pandas(ignore_metadata=True)


def _whole(values: pd.Series) -> bool:
    v = values.to_numpy(dtype="float64")
    return bool((np.isfinite(v) & (v == np.round(v)) & (v >= 1) & (v < 2.0**53)).all())


def check_compute_file(x: VidurInput) -> None:
    """The pipelines' reader and schemas on a compute file (`check_profile`), and every row of the partition's
    device accounted for, each call timed as its row."""
    from maya.pipelines.profile_readers import read_profile

    raw = x.parquet()
    profile = _Profile(x)
    check_profile(profile)  # refusals (ProfileFileError) pass through
    partition = Partition(x.partition, "fuzz")
    frame, left_out, refused = read_profile(raw, VIDUR_COMPUTE, partition)
    rows = _file_rows(raw)
    mine = rows["device"].astype(str).map(catalog_name) == x.partition
    accounted = len(frame) + len(refused) + sum(left_out.values())
    if accounted != int(mine.sum()):
        raise Corrupt(
            f"{int(mine.sum())} rows of {x.partition} in the file, {accounted} accounted for "
            f"({len(frame)} calls, {len(refused)} rejected, left out {left_out})"
        )
    if not (refused["reason"].astype(str).str.len() > 0).all():
        raise Corrupt("a rejected row without a reason")
    if len(frame):
        at = frame["row_index"].to_numpy()
        if not mine.to_numpy()[at].all():
            raise Corrupt(f"calls name rows of another device: {sorted(set(at[~mine.to_numpy()[at]]))}")
        median = pd.to_numeric(rows["time_ms_median"], errors="coerce").to_numpy(dtype="float64")[at] * 1e6
        if not np.allclose(frame["measured_ns"].to_numpy(dtype="float64"), median, rtol=1e-9, equal_nan=True):
            raise Corrupt("a call's measured_ns is not its row's time_ms_median")
        valid = frame[frame["family"].isin(KERNEL_FAMILIES) & frame["dtype"].isin(list(DTYPE_BYTES))]
        for column in ("num_tokens", "tp", "n_head", "n_kv_head", "n_embd", "n_expanded_embd"):
            if not _whole(pd.to_numeric(rows[column], errors="coerce").iloc[valid["row_index"].to_numpy()]):
                raise Corrupt(f"a call from a row whose {column} is not a whole positive count")
        gemm = valid[valid["family"] == "gemm"]["row_index"].to_numpy()
        for column in ("gemm_m", "gemm_n", "gemm_k"):
            if not _whole(pd.to_numeric(rows[column], errors="coerce").iloc[gemm]):
                raise Corrupt(f"a GEMM call from a row whose {column} is not a whole positive size")


@dataclass(frozen=True)
class _Profile:
    """A `VidurInput` as `dataset_inputs.check_profile` reads its inputs."""

    x: VidurInput

    @property
    def format(self) -> str:
        return VIDUR_COMPUTE

    @property
    def hardware(self) -> str:
        return self.x.partition

    def parquet(self) -> bytes:
        return self.x.parquet()


def check_collectives_file(x: VidurInput) -> None:
    """`defs/collectives._validate_file` on a collectives file: never raises; one quarantine row for an
    unreadable file, otherwise every row of the network valid (with whole counts that fit a node, its time the
    row's median) or quarantined with a reason."""
    from maya.pipelines.defs.collectives import MEASUREMENT_COLUMNS, _validate_file
    from maya.pipelines.sources import ProfileFile

    raw = x.parquet()
    checked = _validate_file(
        ProfileFile(Path("fuzz.parquet"), VIDUR_COLLECTIVES), raw, NetworkPartition(x.partition, "fuzz")
    )
    valid = checked.valid if checked.valid is not None else pd.DataFrame()
    quarantined = checked.rejected
    if len(quarantined) and not (quarantined["reason"].astype(str).str.len() > 0).all():
        raise Corrupt("a quarantined row without a reason")
    if len(quarantined) == 1 and quarantined["row_index"].isna().all():
        if len(valid):
            raise Corrupt("a rejected file with valid rows")
        return  # the file was rejected whole, with its reason
    try:
        rows = _file_rows(raw)
    except (pa.ArrowException, OSError, ValueError) as e:
        raise Corrupt(f"rows stored from a file that does not read: {e}") from None
    mine = (rows["network"].astype(str) == x.partition).to_numpy()
    if len(valid) + len(quarantined) != int(mine.sum()):
        raise Corrupt(f"{int(mine.sum())} rows of {x.partition!r}: {len(valid)} valid, {len(quarantined)} quarantined")
    if not len(valid):
        return
    if list(valid.columns) != [*MEASUREMENT_COLUMNS, "path"]:
        raise Corrupt(f"columns {list(valid.columns)}")
    at = valid["row_index"].to_numpy()
    if not mine[at].all():
        raise Corrupt("valid rows name rows of another network")
    numbers = {
        c: pd.to_numeric(rows[c], errors="coerce").to_numpy(dtype="float64")[at]
        for c in ("num_workers", "devices_per_node", "max_devices_per_node", "size_elements", "time_ms_median")
    }
    for column in ("num_workers", "devices_per_node", "max_devices_per_node"):
        if not _whole(pd.Series(numbers[column])):
            raise Corrupt(f"a valid row whose {column} is not a whole positive count: {numbers[column]}")
    if not (
        (valid["ranks"].to_numpy() == numbers["num_workers"]).all()
        and (valid["devices_per_node"].to_numpy() == numbers["devices_per_node"]).all()
        and (valid["devices_per_node"].to_numpy() <= numbers["max_devices_per_node"]).all()
        and (valid["nodes"].to_numpy() * valid["devices_per_node"].to_numpy() >= valid["ranks"].to_numpy()).all()
        and valid["collective"].isin(PRICED_COLLECTIVES).all()
    ):
        raise Corrupt(f"valid rows stored other counts than the file's: {valid.head(3).to_dict('records')}")
    measured, size = valid["measured_ns"].to_numpy(dtype="float64"), valid["bytes"].to_numpy(dtype="float64")
    if not (
        np.isfinite(measured).all()
        and (measured > 0).all()
        and np.isfinite(size).all()
        and (size > 0).all()
        and np.allclose(measured, numbers["time_ms_median"] * 1e6, rtol=1e-9)
    ):
        raise Corrupt(f"valid rows with other times or sizes than the file's: {valid.head(3).to_dict('records')}")


def check_vidur_file(x: VidurInput) -> None:
    (check_compute_file if x.format == VIDUR_COMPUTE else check_collectives_file)(x)


def check_eval(x: VidurInput) -> None:
    """`maya estimators eval --dataset` on the file (compute rows need the trained estimator)."""
    from reliability.dataset_inputs import eval_warehouse

    warehouse = eval_warehouse() if x.format == VIDUR_COMPUTE else _empty_warehouse()
    run_eval(x.parquet(), warehouse)


@lru_cache(maxsize=1)
def _empty_warehouse() -> Path:
    """A warehouse path with no estimator (collectives are priced without one)."""
    return Path(tempfile.mkdtemp(prefix="maya-fuzz-no-estimator-")) / "warehouse.duckdb"


def surfaces() -> list[Surface]:
    return [
        Surface("vidur datasets", vidur_inputs(), check_vidur_file, errors=(ProfileFileError,)),
        Surface(
            "vidur collectives eval", vidur_inputs(VIDUR_COLLECTIVES), check_eval, errors=(EvalFailed,), timeout_s=30
        ),
        Surface("vidur compute eval", vidur_inputs(VIDUR_COMPUTE), check_eval, errors=(EvalFailed,), timeout_s=30),
    ]
