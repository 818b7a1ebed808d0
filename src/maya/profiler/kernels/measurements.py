"""The summary table estimators train on: one row per config (family, op, dtype, shape parameters,
event-timed median/p10/p90, host cost, profiled kernels), whatever its status."""

from __future__ import annotations

import pyarrow as pa

from .configs import PARAM_TYPES
from .results import KernelStats, Timing, percentiles

MEASUREMENTS_VERSION = "1"
VERSION_KEY = b"maya.measurements.version"

_i32, _i64, _s, _b = pa.int32(), pa.int64(), pa.string(), pa.bool_()
SCHEMA = pa.schema(
    [("config_key", _s), ("family", _s), ("op", _s), ("dtype", _s), ("tf32", _b)]
    + [(name, _i64 if kind is int else _s) for name, kind in PARAM_TYPES.items()]
    + [
        ("config_json", _s),
        ("status", _s),
        ("error", _s),
        ("n_repeats", _i32),
        ("n_buffers", _i32),
        ("footprint_bytes", _i64),
        ("median_ns", _i64),
        ("p10_ns", _i64),
        ("p90_ns", _i64),
        ("host_median_ns", _i64),
        ("host_p10_ns", _i64),
        ("host_p90_ns", _i64),
        ("gpu_bound", _b),
        ("kernel_ns", _i64),
        ("n_kernels", _i32),
        ("kernel_names", pa.list_(_s)),
        ("hardware", _s),
        ("device_name", _s),
        ("session_id", _s),
        ("measured_at_ns", _i64),
    ],
    metadata={VERSION_KEY: MEASUREMENTS_VERSION.encode()},
)
"""`median_ns`/`p10_ns`/`p90_ns`: device time of one call of the op (CUDA events); `host_*`: wall time
of the Python call while the device is busy (dispatch and launch cost); `kernel_ns`: median summed
CUPTI duration of the call's device work under torch.profiler; `footprint_bytes`: the memory guard's
estimate; `n_buffers`: rotated input copies."""


def measurement_row(
    timing: Timing,
    stats: KernelStats | None,
    *,
    hardware: str | None,
    device_name: str,
    session_id: str,
    measured_at_ns: int,
) -> dict:
    c = timing.config
    row = {
        "config_key": c.key,
        "family": c.family,
        "op": c.op,
        "dtype": c.dtype,
        "tf32": c.tf32,
        **c.shape,
        "config_json": c.to_json(),
        "status": timing.status,
        "error": timing.error,
        "n_buffers": timing.n_buffers,
        "footprint_bytes": timing.footprint_bytes,
        "hardware": hardware,
        "device_name": device_name,
        "session_id": session_id,
        "measured_at_ns": measured_at_ns,
    }
    if timing.samples is not None:
        s = timing.samples
        row.update(n_repeats=len(s.device_ns), gpu_bound=s.gpu_bound)
        row["p10_ns"], row["median_ns"], row["p90_ns"] = percentiles(s.device_ns)
        row["host_p10_ns"], row["host_median_ns"], row["host_p90_ns"] = percentiles(s.host_ns)
    if stats is not None:
        row.update(kernel_ns=stats.kernel_ns, n_kernels=len(stats.kernel_names), kernel_names=stats.kernel_names)
    return row


def to_table(rows: list[dict]) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=SCHEMA)
