"""The writers `crash.kill_trials` kills: the trace writer (a run written part by part as `maya emulate`
writes one, files rewritten in place by `migrate_run`, a run imported whole by `import_kineto`), the warehouse's run catalog, the estimator registry, the search log,
the predictions store, `maya validate`'s results and the pipelines' validated partition. Each function runs
in a forked child."""

from __future__ import annotations

import hashlib
import json
import logging
import pickle
import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from paths import FIXTURES
from reliability.crash import Scenario

from maya_trace_spec import TABLES, Run, migrations, synthetic, table_files
from maya_trace_spec.schema import VERSION_KEY

# ------------------------------------------------------------------ trace files rewritten in place


def _with_migration() -> None:
    """Files of major 0 migrate to 1 unchanged (the spec has no real major 0: this exercises `migrate_run`)."""
    migrations.MIGRATIONS[0] = lambda name, table: table


def _prepare_migration(root: Path) -> None:
    run = synthetic.write_run(root / "run", world_size=1, calls_per_rank=100, ops_per_rank=10)
    for name in TABLES:
        for _, path in table_files(run, name):
            table = pq.read_table(path)
            pq.write_table(table.replace_schema_metadata({**table.schema.metadata, VERSION_KEY: b"0.9.0"}), path)


def _migrate(root: Path) -> None:
    from maya_trace_spec.reader import migrate_run

    _with_migration()
    migrate_run(root / "run")


def _files_state(root: Path) -> dict:
    """Per file: its major version and a digest of the data it reads as (every file must read)."""
    from maya_trace_spec import inspect_file, read_file

    _with_migration()
    run = root / "run"
    Run(run)
    out = {}
    for name in TABLES:
        for _, path in table_files(run, name):
            data = read_file(path, expect_table=name).to_pylist()
            out[str(path.relative_to(run))] = (
                inspect_file(path).major,
                hashlib.sha256(repr(data).encode()).hexdigest(),
            )
    return out


def _each_file_old_or_new(state: dict, old: dict, new: dict) -> bool:
    return set(state) == set(old) == set(new) and all(state[f] in (old[f], new[f]) for f in state)


def _hidden(root: Path) -> int:
    return sum(1 for p in root.rglob(".*") if p.name.endswith(".tmp"))


# ------------------------------------------------------------------ a Kineto import (written whole)


def _prepare_kineto(root: Path) -> None:
    shutil.copy(FIXTURES / "kineto_gpu_small.json", root / "rank1.json")


def _import(root: Path) -> None:
    from maya_trace_spec.interop.kineto import import_kineto

    if not (root / "out").exists():  # the caller's resume: an import is all or nothing
        import_kineto([root / "rank1.json"], root / "out", hardware="h100-sxm")


def _imported(root: Path) -> Any:
    from maya_trace_spec.validation import validate_run

    out = root / "out"
    if not out.exists():
        return None
    problems = validate_run(out)
    if problems:
        raise AssertionError(f"the imported run does not validate: {problems[:3]}")
    run = Run(out)
    tables = {name: run.table(name).to_pylist() for name in TABLES if name != "run"}
    return hashlib.sha256(repr(tables).encode()).hexdigest(), {
        k: v for k, v in run.info.items() if k not in ("run_id", "created_at_ns")
    }


# ------------------------------------------------------------------ a run written by the trace writer


_WRITTEN = dict(world_size=2, parts=3, calls_per_part=400)
"""The run `_write_trace` writes: 2 ranks, each table in 3 parts (the emulator flushes a part every
`PART_ROWS` rows)."""


def _write_trace(root: Path) -> None:
    """The trace writer (`maya_trace_spec.writer.RunWriter`) writing a run as `maya emulate` does: `run` first
    with status `running`, each rank's tables as parts, then `devices` and `run` rewritten as `complete`. A
    run that is not complete is removed and written again (the resume of `maya search`'s evaluator); a
    complete one is left as it is."""
    from maya_trace_spec import RunWriter, read_table

    out = root / "out"
    if (out / "run.parquet").exists() and read_table(out, "run").column("status")[0].as_py() == "complete":
        return
    if out.exists():
        shutil.rmtree(out)
    w = RunWriter(out)
    n, parts, per_part = _WRITTEN["world_size"], _WRITTEN["parts"], _WRITTEN["calls_per_part"]
    run = {
        "run_id": ["r1"],
        "created_at_ns": [1],
        "source": ["emulator"],
        "command": [json.dumps(["train.py"])],
        "hardware": ["h100-sxm"],
        "world_size": [n],
        "nnodes": [1],
        "nproc_per_node": [n],
        "producer_version": ["crash test"],
    }
    w.write("run", {**run, "status": ["running"]})
    ops = 10
    for rank in range(n):
        w.write(
            "kernels",
            {
                "kernel_id": list(range(len(synthetic.KERNEL_NAMES))),
                "name": [k for k, _, _ in synthetic.KERNEL_NAMES],
                "family": [f for _, f, _ in synthetic.KERNEL_NAMES],
                "library": [lib for _, _, lib in synthetic.KERNEL_NAMES],
            },
            rank=rank,
        )
        w.write(
            "communicators",
            {
                "comm_id": ["c0"],
                "comm_rank": [rank],
                "comm_size": [n],
                "pg_name": ["0"],
                "ranks": [list(range(n))],
                "device": [rank],
            },
            rank=rank,
        )
        w.write(
            "ops",
            {
                "op_id": list(range(ops)),
                "name": ["aten::mm"] * ops,
                "start_ns": list(range(ops)),
                "end_ns": list(range(1, ops + 1)),
                "time_source": ["emulated"] * ops,
            },
            rank=rank,
        )
        for part in range(parts):
            calls = synthetic.api_calls(per_part, seed=10 * rank + part, n_ops=ops, t0=part * 10**9)
            w.write(
                "api_calls",
                calls.set_column(0, "seq", pa.array(range(part * per_part, (part + 1) * per_part), pa.int64())),
                rank=rank,
            )
            w.write(
                "memory_events",
                {
                    "seq": [2 * part, 2 * part + 1],
                    "ts_ns": [part * 10**9, part * 10**9 + 5],
                    "kind": ["alloc", "free"],
                    "space": ["device"] * 2,
                    "address": [1 << 40] * 2,
                    "bytes": [2 << 20] * 2,
                    "device": [rank] * 2,
                    "allocated_bytes": [2 << 20, 0],
                },
                rank=rank,
            )
    for rank in range(n):
        w.write(
            "devices",
            {
                "local_rank": [rank],
                "node": [0],
                "device_index": [rank],
                "device_name": ["NVIDIA H100 80GB HBM3"],
                "hardware": ["h100-sxm"],
                "sm_major": [9],
                "sm_minor": [0],
                "sm_count": [132],
                "memory_bytes": [80 * 2**30],
                "represents": [[rank]],
            },
            rank=rank,
        )
    w.write("run", {**run, "status": ["complete"]})


def _written(root: Path) -> Any:
    """None (no run yet), or the run's status and, per committed file, a digest of what it reads as (every
    file must read; a complete run must validate)."""
    from maya_trace_spec import read_file
    from maya_trace_spec.validation import validate_run

    out = root / "out"
    if not (out / "run.parquet").exists():
        return None
    status = Run(out).info["status"]
    if status == "complete" and (problems := validate_run(out)):
        raise AssertionError(f"a complete run that does not validate: {problems[:3]}")
    return status, {
        str(path.relative_to(out)): hashlib.sha256(
            repr(read_file(path, expect_table=name).to_pylist()).encode()
        ).hexdigest()
        for name in TABLES
        for _, path in table_files(out, name)
        if name != "run"
    }


def _running_or_done(state: Any, old: Any, new: Any) -> bool:
    """Old (no run), new, or a run still marked `running` whose committed files are each one the uninterrupted
    run wrote, whole (a reader sees the capture is incomplete, never a half-written file)."""
    if state in (old, new):
        return True
    status, files = state
    return status == "running" and all(new[1].get(name) == digest for name, digest in files.items())


# ------------------------------------------------------------------ the warehouse's run catalog


def _prepare_runs(root: Path) -> None:
    from maya.core.warehouse import register_run

    for name in ("a", "b"):
        synthetic.write_run(root / name, world_size=1, calls_per_rank=50, ops_per_rank=5)
    register_run(root / "a", root / "warehouse.duckdb")


def _register(root: Path) -> None:
    from maya.core.warehouse import register_run

    register_run(root / "b", root / "warehouse.duckdb")


def _rows(warehouse: Path, sql: str) -> list:
    import duckdb

    from maya.core.warehouse import wait_for_lock

    con = wait_for_lock(lambda: duckdb.connect(str(warehouse), read_only=True))
    try:
        return sorted(con.execute(sql).fetchall(), key=repr)
    finally:
        con.close()


def _runs(root: Path) -> list:
    return _rows(
        root / "warehouse.duckdb", "SELECT run_id, path, source, status, world_size, ranks, api_calls, ops FROM runs"
    )


# ------------------------------------------------------------------ the estimator registry


def _prepare_registry(root: Path) -> None:
    from maya.estimators import KernelEstimator, Registry

    Registry(root / "warehouse.duckdb").register(KernelEstimator(), data_hash="d1", config_hash="c", metrics={})


def _register_version(root: Path) -> None:
    from maya.estimators import KernelEstimator, Registry

    Registry(root / "warehouse.duckdb").register(KernelEstimator(), data_hash="d2", config_hash="c", metrics={})


def _versions(root: Path) -> Any:
    from maya.estimators import Registry

    registry = Registry(root / "warehouse.duckdb")
    versions = registry.versions()
    for record in versions:
        registry.load(record.version)  # the artifact is there and its SHA-256 matches
    return [(r.version, r.data_hash, r.artifact_sha256) for r in versions], registry.latest()


def _orphans(root: Path) -> int:
    from maya.estimators import Registry

    registry = Registry(root / "warehouse.duckdb")
    known = {r.version for r in registry.versions()}
    folder = root / "estimators"
    return sum(1 for d in folder.iterdir() if d.name not in known) if folder.is_dir() else 0


# ------------------------------------------------------------------ the search log


def _space():
    from maya.search import load_space

    return load_space(
        {"parameters": {"tp": [1, 2, 4], "mbs": [1, 2, 4, 8]}}, ["train.py", "--tp", "{tp}", "--mbs", "{mbs}"], gpus=8
    )


def _evaluate(task, known):
    from maya.search import Outcome

    values = dict(zip(task.argv[1::2], task.argv[2::2]))
    tp, mbs = int(values["--tp"]), int(values["--mbs"])
    return Outcome(
        "oom" if tp * mbs > 16 else "ok", 1e6 * (10 * tp + mbs), 2**30 * tp * mbs, 0.4, world_size=task.world_size
    )


def _prepare_search(root: Path) -> None:
    from maya.search import SearchLog

    space = _space()
    SearchLog("crash", root / "warehouse.duckdb").open(space.digest(), space.command, {"algorithm": "grid"})


def _search(root: Path) -> None:
    from maya.search import SearchLog, run_search

    run_search(_space(), _evaluate, algorithm="grid", log=SearchLog("crash", root / "warehouse.duckdb"))


def _points(root: Path) -> dict:
    from maya.search import SearchLog

    return {
        k: (o.status, o.iteration_ns, o.peak_memory_bytes, o.source)
        for k, o in SearchLog("crash", root / "warehouse.duckdb").points().items()
    }


def _logged_prefix(state: dict, old: dict, new: dict) -> bool:
    """Points are logged one by one: any of the new points, each as the uninterrupted run logged it."""
    return set(old) <= set(state) <= set(new) and all(state[k] == new[k] for k in state)


# ------------------------------------------------------------------ the predictions store


def _prepare_predictions(root: Path) -> None:
    from dataclasses import replace

    from maya.simulator.predict import predict
    from maya.simulator.store import store_prediction

    run = synthetic.write_run(root / "run", world_size=1, calls_per_rank=100, ops_per_rank=10)
    prediction = predict(run, durations="roofline")
    (root / "prediction.pkl").write_bytes(pickle.dumps(replace(prediction, run_id="second")))
    store_prediction(prediction, root / "warehouse.duckdb")


def _store(root: Path) -> None:
    from maya.simulator.store import store_prediction

    stored = _rows(root / "warehouse.duckdb", "SELECT run_id FROM predictions")
    if ("second",) not in stored:  # the caller's resume: store unless stored
        store_prediction(pickle.loads((root / "prediction.pkl").read_bytes()), root / "warehouse.duckdb")


def _predictions(root: Path) -> list:
    rows = _rows(root / "warehouse.duckdb", "SELECT * EXCLUDE (prediction_id, created_at) FROM predictions")
    for row in rows:
        json.loads(row[-1])  # the report is whole JSON
    return rows


# ------------------------------------------------------------------ `maya validate` results


def _validation_row(row: int):
    from maya.validation.store import RowKey, RowResult

    return RowResult(
        suite="crash",
        suite_digest="s1",
        kind="e2e",
        key=RowKey(row=row, label=f"row {row}", gpu="h100", size="1b", gpus=8, measured_s=1.0 + row),
        estimator_version="v1",
        predictor_digest="p1",
        status="ok",
        hardware="h100-sxm",
        predicted_s=1.1 + row,
        error_pct=10.0,
        mfu=0.4,
        details={"iterations": list(range(row * 50))},
    )


def _prepare_validation(root: Path) -> None:
    from maya.validation.store import save

    save(_validation_row(0), root / "warehouse.duckdb")


def _validate_rows(root: Path) -> None:
    """Rows 1-6 saved one by one as `maya validate` does; a resumed run skips the rows already stored."""
    from maya.validation.store import save, stored

    done = stored(root / "warehouse.duckdb", "s1", "v1", "p1")
    for row in range(1, 7):
        if row not in done:
            save(_validation_row(row), root / "warehouse.duckdb")


def _validation_rows(root: Path) -> dict:
    rows = _rows(root / "warehouse.duckdb", "SELECT * EXCLUDE (recorded_at) FROM validation_rows")
    for row in rows:
        json.loads(row[-1])  # details are whole JSON
    return {row[3]: row for row in rows}  # by "row"


# ------------------------------------------------------------------ the pipelines' validated partition


def _profiles(root: Path, configs: int) -> Path:
    from maya.profiler.kernels.configs import KernelConfig
    from maya.profiler.kernels.measurements import measurement_row, to_table
    from maya.profiler.kernels.results import Samples, Timing

    parts = root / "profiles" / "h100-sxm" / "kernels-crash" / "measurements"
    parts.mkdir(parents=True, exist_ok=True)
    rows = []
    for i in range(configs):
        config = KernelConfig.make("linear", "bf16", m=256 * (i + 1), n=1024, k=1024)
        rows.append(
            measurement_row(
                Timing(config, "ok", 1 << 20, 2, Samples([10_000 + i] * 3, [5_000] * 3, gpu_bound=True)),
                None,
                hardware="h100-sxm",
                device_name="NVIDIA H100 80GB HBM3",
                session_id="s",
                measured_at_ns=0,
            )
        )
    rows[-1]["median_ns"] = -1  # one row to quarantine
    pq.write_table(to_table(rows), parts / f"part-{configs:05d}.parquet")
    return parts


_QUIET = logging.getLogger("maya.reliability.crash")
_QUIET.addHandler(logging.NullHandler())
_QUIET.propagate = False  # the quarantine warnings each trial logs are expected


def _validate_partition(root: Path) -> None:
    from maya.pipelines.defs import profiles
    from maya.pipelines.partitions import partition_key
    from maya.pipelines.resources import DataSources, Warehouse
    from maya.pipelines.sources import Partition

    context = SimpleNamespace(partition_key=partition_key(Partition("h100-sxm", "kernels-crash")), log=_QUIET)
    profiles.validated_kernel_profiles.op.compute_fn.decorated_fn(
        context,
        Warehouse(path=str(root / "warehouse.duckdb")),
        DataSources(profiles_dir=str(root / "profiles"), neusight=False),
    )


def _prepare_partition(root: Path) -> None:
    _profiles(root, 6)
    _validate_partition(root)
    _profiles(root, 9)  # a new file lands: the next validation replaces the partition's rows


def _partition(root: Path) -> Any:
    wh = root / "warehouse.duckdb"
    return (
        _rows(wh, "SELECT files, rows, quarantined FROM profile_partitions"),  # content_hash hashes paths
        _rows(wh, "SELECT path, row_index, m, measured_ns FROM kernel_profiles"),
        _rows(wh, "SELECT path, row_index, reason FROM quarantine"),
    )


def scenarios() -> list[Scenario]:
    trace = ("maya_trace_spec.reader", "maya_trace_spec.validation")
    warehouse = ("duckdb", "maya.core.warehouse")
    return [
        Scenario(
            "trace files migrated in place",
            _prepare_migration,
            _migrate,
            _files_state,
            _each_file_old_or_new,
            _hidden,
            modules=trace,
        ),
        Scenario(
            "trace writer",
            lambda root: None,
            _write_trace,
            _written,
            _running_or_done,
            leftovers=lambda root: _hidden(root / "out") if (root / "out").exists() else 0,
            modules=(*trace, "maya_trace_spec.synthetic"),
        ),
        Scenario(
            "kineto import",
            _prepare_kineto,
            _import,
            _imported,
            modules=(*trace, "maya_trace_spec.interop.kineto"),
            leftovers=lambda root: sum(1 for p in root.iterdir() if p.name.startswith(".out.")),
        ),
        Scenario("warehouse run catalog", _prepare_runs, _register, _runs, modules=warehouse),
        Scenario(
            "estimator registry",
            _prepare_registry,
            _register_version,
            _versions,
            leftovers=_orphans,
            modules=(*warehouse, "maya.estimators.registry", "maya.estimators.kernel_estimator"),  # not lazy names
        ),
        Scenario("search log", _prepare_search, _search, _points, _logged_prefix, modules=(*warehouse, "maya.search")),
        Scenario(
            "predictions store",
            _prepare_predictions,
            _store,
            _predictions,
            modules=(*warehouse, "maya.simulator.predict"),
        ),
        Scenario(
            "maya validate results",
            _prepare_validation,
            _validate_rows,
            _validation_rows,
            _logged_prefix,
            modules=(*warehouse, "maya.validation.store"),
        ),
        Scenario(
            "pipeline partition",
            _prepare_partition,
            _validate_partition,
            _partition,
            modules=(*warehouse, "maya.pipelines.defs.profiles", "maya.profiler.kernels.measurements"),
        ),
    ]
