"""Measurement datasets as the pipelines read them (`profile_readers.read_profile`, `profile_schema.split_valid`,
the quarantine records of `defs/profiles.py`) and as `maya estimators eval --dataset` reads them: generated
Parquet files in the kernel-campaign and NeuSight formats — columns missing or of other types, values
outside every range, other format versions, bytes flipped. A file is refused with a `ProfileFileError` (one
quarantine row) or split into valid rows (which satisfy the schema) and rejected rows with a reason; `maya
estimators eval` prints its table or one error line."""

from __future__ import annotations

import io
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import strategies as st
from reliability.harness import Corrupt, Surface

from maya.core.hardware import names
from maya.estimators.neusight_data import FAMILY_OF_OP
from maya.pipelines.profile_readers import ProfileFileError, read_profile
from maya.pipelines.profile_schema import split_valid
from maya.pipelines.sources import MEASUREMENTS, NEUSIGHT, Partition
from maya.profiler.kernels.configs import OP_FAMILY
from maya.profiler.kernels.measurements import VERSION_KEY
from maya_trace_spec.vocabulary import DTYPE_BYTES, KERNEL_FAMILIES

DEVICES = [
    "NVIDIA H100 80GB HBM3",
    "NVIDIA A100-SXM4-40GB",
    "Tesla T4",
    "Tesla V100-SXM2-32GB",
    "NVIDIA L4",
    "h100-sxm",
    "Some GPU",
    "",
]
MEASUREMENT_COLUMNS = {
    "op": list(OP_FAMILY),
    "dtype": ["bf16", "fp16", "fp32", "u8"],
    "status": ["ok", "ok", "failed", "oom", "unsupported"],
    "median_ns": None,
    "tf32": [True, False],
    "hardware": names()[:6],
    "device_name": DEVICES,
    **{
        p: None
        for p in (
            "m",
            "n",
            "k",
            "batch",
            "seq",
            "heads",
            "head_dim",
            "tokens",
            "hidden",
            "rows",
            "cols",
            "vocab",
            "n_params",
            "bytes",
        )
    },
}
NEUSIGHT_COLUMNS = {
    "op": list(FAMILY_OF_OP),
    "device": DEVICES,
    "latency_ms": None,
    **{c: None for c in ("b", "m", "n", "k", "h")},
}
numbers = st.one_of(
    st.integers(1, 1 << 14),
    st.integers(1, 1 << 14),
    st.integers(-(1 << 62), 1 << 62),
    st.floats(allow_nan=True, allow_infinity=True),
    st.just(0),
)
junk = st.one_of(st.text(max_size=5), numbers, st.booleans(), st.none())


@dataclass(frozen=True)
class DatasetInput:
    format: str
    table: dict[str, tuple[Any, ...]]
    version: bytes | None
    flips: tuple[tuple[int, int], ...]
    hardware: str

    def parquet(self) -> bytes:
        table = arrow_table(self.table)
        if self.version is not None:
            table = table.replace_schema_metadata({VERSION_KEY: self.version})
        return flipped_parquet(table, self.flips)


def arrow_table(columns: dict[str, tuple[Any, ...]]) -> pa.Table:
    """The generated columns as an Arrow table: a column Arrow cannot type as it is becomes text."""
    arrays = {}
    for name, values in columns.items():
        try:
            arrays[name] = pa.array(list(values))
        except (pa.ArrowException, OverflowError, TypeError, ValueError):
            arrays[name] = pa.array([None if v is None else str(v) for v in values], pa.string())
    return pa.table(arrays) if arrays else pa.table({"x": pa.array([], pa.int64())})


def flipped_parquet(table: pa.Table, flips: tuple[tuple[int, int], ...]) -> bytes:
    """`table` as Parquet bytes with the bytes at `flips`' positions (modulo the length) replaced."""
    sink = io.BytesIO()
    pq.write_table(table, sink)
    data = bytearray(sink.getvalue())
    for pos, byte in flips:
        data[pos % len(data)] = byte
    return bytes(data)


@st.composite
def dataset_inputs(draw, fmt: str | None = None) -> DatasetInput:
    """A file in either format (or `fmt`): mostly good values with some junk, or junk throughout."""
    fmt = fmt or draw(st.sampled_from([MEASUREMENTS, NEUSIGHT]))
    spec = MEASUREMENT_COLUMNS if fmt == MEASUREMENTS else NEUSIGHT_COLUMNS
    rows = draw(st.integers(0, 8))
    plain = draw(st.integers(0, 2)) > 0
    table = {}
    for name, vocabulary in spec.items():
        if draw(st.integers(0, 19 if plain else 9)) == 0:
            continue  # a missing column
        good = st.sampled_from(vocabulary) if vocabulary else st.integers(1, 1 << 14)
        odds = 12 if plain and draw(st.integers(0, 3)) else 1  # good cells per odd one
        table[name] = tuple(
            draw(good) if draw(st.integers(0, odds)) else draw(st.one_of(junk, numbers)) for _ in range(rows)
        )
    if draw(st.integers(0, 5)) == 0:
        table[draw(st.text(max_size=4))] = tuple(draw(st.lists(junk, min_size=rows, max_size=rows)))
    version = draw(st.sampled_from([None, b"1", b"1", b"1", b"1", b"2", b"\xff", b""]))
    flips = tuple(
        draw(st.lists(st.tuples(st.integers(0, 1 << 14), st.integers(0, 255)), max_size=2))
        if draw(st.integers(0, 7)) == 0
        else ()
    )
    hardware = draw(st.sampled_from(["h100-sxm", "a100-sxm-40gb", "t4", "some-gpu"]))
    return DatasetInput(fmt, table, version, flips, hardware)


def check_profile(x: DatasetInput) -> None:
    from maya.pipelines.defs.profiles import _validate_file
    from maya.pipelines.sources import ProfileFile

    partition = Partition(x.hardware, "fuzz")
    raw = x.parquet()
    frame, left_out, refused = read_profile(raw, x.format, partition)  # refused: by a source's own schema
    valid, rejected = split_valid(frame, partition.hardware)
    if len(valid) + len(rejected) != len(frame):
        raise Corrupt(f"{len(frame)} rows split into {len(valid)} valid and {len(rejected)} rejected")
    if len(rejected) and not rejected["reason"].astype(str).str.len().gt(0).all():
        raise Corrupt("a rejected row without a reason")
    if len(valid):
        measured = valid["measured_ns"].to_numpy(dtype="float64")
        sizes = valid[["batch", "m", "n", "k", "numel", "row", "bytes"]].to_numpy(dtype="float64")
        if (
            not (np.isfinite(measured) & (measured > 0)).all()
            or (sizes[~np.isnan(sizes)] <= 0).any()
            or not (valid["hardware"] == partition.hardware).all()
            or not valid["family"].isin(KERNEL_FAMILIES).all()
            or not valid["dtype"].isin(list(DTYPE_BYTES)).all()
        ):
            raise Corrupt(f"an invalid row passed validation: {valid.head(3).to_dict('records')}")
    quarantined = _validate_file(ProfileFile(Path("fuzz.parquet"), x.format), raw, partition).rejected
    if len(quarantined) != len(rejected) + len(refused) or (
        len(quarantined)  # none: a frame without columns (`_concat`)
        and not quarantined["record"].map(lambda r: isinstance(r, str)).all()
    ):
        raise Corrupt("quarantine rows do not match the rejected rows")


@lru_cache(maxsize=1)
def eval_warehouse() -> Path:
    """A warehouse with the small trained estimator registered as `latest`."""
    from reliability.estimator_inputs import trained

    from maya.estimators import Registry

    warehouse = Path(tempfile.mkdtemp(prefix="maya-fuzz-eval-")) / "warehouse.duckdb"
    Registry(warehouse).register(trained(), data_hash="fuzz", config_hash="fuzz", metrics={})
    return warehouse


class EvalFailed(Exception):
    """`maya estimators eval` exited non-zero with a message (the CLI's documented refusal)."""


def check_eval(x: DatasetInput) -> None:
    if x.format == NEUSIGHT:
        run_eval(x.parquet(), eval_warehouse())


def run_eval(data: bytes, warehouse: Path) -> None:
    """`maya estimators eval --dataset FILE` on `data`: its table printed (with finite errors), or `EvalFailed`
    with its one error line."""
    from typer.testing import CliRunner

    from maya.cli import app

    with tempfile.TemporaryDirectory(prefix="maya-fuzz-eval-") as tmp:
        dataset = Path(tmp) / "kernels.parquet"
        dataset.write_bytes(data)
        r = CliRunner().invoke(app, ["estimators", "eval", "--dataset", str(dataset), "--warehouse", str(warehouse)])
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        raise r.exception
    if r.exit_code != 0:
        output = r.output.strip()
        raise EvalFailed(output[output.rfind("error:") :] if "error:" in output else output)  # rich wraps it
    table = "\n".join(line for line in r.output.splitlines() if "│" in line).lower()  # not the notes' values
    if "nan" in table or "inf" in table:
        raise Corrupt(f"eval printed a non-finite error: {r.output[-500:]}")


def surfaces() -> list[Surface]:
    eval_warehouse()
    return [
        Surface("measurement datasets", dataset_inputs(), check_profile, errors=(ProfileFileError,)),
        Surface("estimators eval", dataset_inputs(NEUSIGHT), check_eval, errors=(EvalFailed,), timeout_s=30),
    ]
