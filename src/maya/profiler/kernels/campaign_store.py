"""A campaign directory: the measured trace, the summary table, and which configs are done.

    DIR/trace/           a maya_trace_spec run (time_source `measured`): run.parquet, devices/,
                         api_calls/, ops/, kernels/ — every profiled call of every config
    DIR/measurements/    part-NNNNN.parquet: one row per config, any status

Everything is append-only and each file is written atomically, so a campaign stopped at any moment
resumes after its last complete chunk: configs with a measurements row are done and skipped. The
measurements part is a chunk's commit record and is written last; trace rows of a chunk killed
before it (no measurements row refers to them) are left as orphans and measured again.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from maya_trace_spec import SPEC_VERSION, RunWriter, file_schema, read_table, table_files
from maya_trace_spec.writer import atomic_write

from ..device_info import DeviceInfo
from .measurements import SCHEMA, to_table
from .trace_merge import ChunkTrace, IdCounters

RANK = 0
PRODUCER = f"maya.profiler (maya_trace_spec {SPEC_VERSION})"
_PART_RE = re.compile(r"^part-(\d{5,})\.parquet$")


class CampaignMismatch(Exception):
    """The directory holds a campaign measured on another device."""


def _rows(table: str, rows: list[dict]) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=file_schema(table))


def measurement_parts(root: Path) -> list[Path]:
    directory = Path(root) / "measurements"
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.iterdir() if _PART_RE.match(p.name))


def read_measurements(root: str | Path) -> pa.Table:
    """Every measurements row of the campaign in `root`."""
    parts = [pq.read_table(p, schema=SCHEMA) for p in measurement_parts(Path(root))]
    return pa.concat_tables(parts) if parts else SCHEMA.empty_table()


class CampaignStore:
    def __init__(self, root: str | Path):
        self.root = Path(root)
        self.trace_dir = self.root / "trace"
        self.ids = IdCounters()

    def done_keys(self) -> set[str]:
        return {
            k
            for p in measurement_parts(self.root)
            for k in pq.read_table(p, columns=["config_key"]).column("config_key").to_pylist()
        }

    # ---------------------------------------------------------------- sessions

    def start_session(
        self, device: DeviceInfo, hardware: str | None, session: dict, *, framework: str, cuda_version: str | None
    ) -> None:
        """Record a new session in `run` (status `running`); create the campaign if it is new."""
        writer = RunWriter(self.trace_dir)
        if (self.trace_dir / "run.parquet").exists():
            run = self._run()
            attrs = json.loads(run["attrs"])
            if attrs["device"]["name"] != device.name:
                raise CampaignMismatch(
                    f"{self.root} was measured on {attrs['device']['name']!r}, "
                    f"not on this {device.name!r}: use another --out"
                )
            attrs["sessions"].append(session)
        else:
            run = {
                "run_id": uuid.uuid4().hex,
                "created_at_ns": time.time_ns(),
                "source": "profiler",
                "hardware": hardware,
                "world_size": 1,
                "nnodes": 1,
                "nproc_per_node": 1,
                "producer_version": PRODUCER,
            }
            attrs = {"device": device.as_dict(), "sessions": [session]}
        if not table_files(self.trace_dir, "devices"):
            writer.write(
                "devices",
                _rows(
                    "devices",
                    [
                        {
                            "local_rank": 0,
                            "node": 0,
                            "device_index": device.index or 0,
                            "device_name": device.name,
                            "hardware": hardware,
                            "sm_major": device.sm_major,
                            "sm_minor": device.sm_minor,
                            "sm_count": device.sm_count,
                            "memory_bytes": device.memory_bytes,
                            "hostname": device.hostname,
                            "pid": session.get("pid"),
                        }
                    ],
                ),
                rank=RANK,
            )
        self._write_run(
            {
                **run,
                "status": "running",
                "command": json.dumps(session.get("command")),
                "framework": framework,
                "cuda_version": cuda_version,
                "attrs": json.dumps(attrs),
            }
        )
        self.ids = self._id_counters()

    def end_session(self, **fields) -> None:
        """Add `fields` to the latest session and mark the run complete."""
        run = self._run()
        attrs = json.loads(run["attrs"])
        attrs["sessions"][-1].update(fields)
        self._write_run({**run, "status": "complete", "attrs": json.dumps(attrs)})

    def _run(self) -> dict:
        return read_table(self.trace_dir, "run").to_pylist()[0]

    def _write_run(self, row: dict) -> None:
        RunWriter(self.trace_dir).write("run", _rows("run", [row]))

    def _id_counters(self) -> IdCounters:
        def next_value(table: str, column: str) -> int:
            top = [
                pc.max(pq.read_table(p, columns=[column]).column(column)).as_py()
                for _, p in table_files(self.trace_dir, table)
            ]
            return max((t for t in top if t is not None), default=-1) + 1

        kernels = read_table(self.trace_dir, "kernels").select(["name", "kernel_id"]).to_pylist()
        return IdCounters(
            next_value("api_calls", "seq"), next_value("ops", "op_id"), {k["name"]: k["kernel_id"] for k in kernels}
        )

    # ---------------------------------------------------------------- chunks

    def append(self, trace: ChunkTrace | None, measurements: list[dict]) -> None:
        """Write one chunk: its trace parts, then its measurements part (the commit record)."""
        if trace is not None:
            writer = RunWriter(self.trace_dir)
            for name, rows in trace.tables.items():
                if rows:
                    writer.write(name, _rows(name, rows), rank=RANK)
            self.ids = trace.ids
        if measurements:
            parts = measurement_parts(self.root)
            index = int(_PART_RE.match(parts[-1].name).group(1)) + 1 if parts else 0
            atomic_write(
                to_table(measurements), self.root / "measurements" / f"part-{index:05d}.parquet", replace=False
            )
