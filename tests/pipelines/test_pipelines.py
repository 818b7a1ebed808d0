"""The Dagster pipelines, run in process on the shipped data (NeuSight, training subsampled) plus a small
kernel campaign with bad files: warehouse tables, the registered version, the end-to-end check, the
dashboard, idempotent re-runs, quarantine, transactions, the campaign sensor and job, and `maya sql`
reading while a run writes."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import dagster as dg
import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from maya.core.paths import data_dir
from maya.estimators import KernelEstimator, Registry
from maya.estimators.neusight_data import load_kernels, neusight_dir
from maya.estimators.vidur_data import load_compute
from maya.pipelines import ground_truth
from maya.pipelines.dashboard import PLOTS
from maya.pipelines.definitions import defs
from maya.pipelines.defs import campaign, collectives, dashboard, estimators, profiles, sensors, validation
from maya.pipelines.measurement_calls import measurement_calls
from maya.pipelines.partitions import network_partition_key, partition_key
from maya.pipelines.resources import DataSources, Warehouse
from maya.pipelines.sources import (
    NEUSIGHT_CAMPAIGN,
    PUBLIC_KERNEL_SOURCES,
    VIDUR_COLLECTIVES_CAMPAIGN,
    VIDUR_COMPUTE_CAMPAIGN,
    NetworkPartition,
    Partition,
    find_network_partitions,
    find_partitions,
)
from maya.profiler.kernels.configs import KernelConfig
from maya.profiler.kernels.measurements import measurement_row, to_table
from maya.profiler.kernels.results import Samples, Timing
from maya.profiler.workloads.results import write_result

pytestmark = pytest.mark.filterwarnings("ignore::dagster.PreviewWarning", "ignore::dagster.BetaWarning")

CAMPAIGN = Partition("h100-sxm", "kernels-2026-01")
TRAINING = {"sample_rows": 3000, "trees": 20, "depth": 4, "holdout": False}
DOWNSTREAM = [
    estimators.kernel_estimators,
    validation.estimator_validation,
    validation.end_to_end_error_within_5_percent,
    dashboard.accuracy_dashboard,
]
GOOD_CONFIGS = [
    KernelConfig.make("linear", "bf16", m=4096, n=4096, k=4096),
    KernelConfig.make("bmm", "fp16", batch=32, m=512, n=512, k=64),
    KernelConfig.make("mm", "fp32", tf32=True, m=2048, n=2048, k=2048),
    KernelConfig.make(
        "sdpa_fwd", "bf16", batch=4, seq=2048, heads=16, kv_heads=16, head_dim=128, causal=1, backend="flash"
    ),
    KernelConfig.make("layer_norm_fwd", "bf16", tokens=8192, hidden=4096),
    KernelConfig.make("softmax_fwd", "fp32", rows=8192, cols=50304),
    KernelConfig.make("add", "bf16", tokens=8192, hidden=4096),
    KernelConfig.make("cross_entropy_fwd", "bf16", tokens=8192, vocab=50304),
    KernelConfig.make("embedding_fwd", "bf16", tokens=8192, hidden=4096, vocab=50304),
    KernelConfig.make("adamw_fused", "fp32", hidden=1024, ffn="gelu", tp=1, layers=1, n_tensors=12, n_params=12582912),
    KernelConfig.make("memcpy_d2d", "u8", bytes=1 << 26),
    KernelConfig.make("copy_cast", "fp32", tokens=8192, hidden=4096, dst_dtype="bf16"),
]


def measurement(config: KernelConfig, median_ns: int | None, status: str = "ok", hardware: str = "h100-sxm") -> dict:
    """A measurements row as the profiler writes it."""
    samples = Samples([median_ns or 1] * 3, [5_000] * 3, gpu_bound=True) if status == "ok" else None
    row = measurement_row(
        Timing(config, status, 1 << 20, 2, samples),
        None,
        hardware=hardware,
        device_name="NVIDIA H100 80GB HBM3",
        session_id="s1",
        measured_at_ns=0,
    )
    return {**row, "median_ns": median_ns} if status == "ok" else row


def write_campaign(profiles_dir: Path) -> dict:
    """A campaign with one good file, one with bad rows among good ones, one of another schema and one
    that is not Parquet; returns the expected row counts."""
    parts = profiles_dir / CAMPAIGN.hardware / CAMPAIGN.campaign / "measurements"
    parts.mkdir(parents=True)
    good = [measurement(c, 10_000 + 1_000 * i) for i, c in enumerate(GOOD_CONFIGS)]
    good.append(measurement(KernelConfig.make("memcpy_h2d", "u8", bytes=4096, pinned=1), None, status="unsupported"))
    pq.write_table(to_table(good), parts / "part-00000.parquet")
    mixed = [
        measurement(KernelConfig.make("linear", "bf16", m=1024, n=1024, k=1024), 50_000),
        measurement(KernelConfig.make("linear", "bf16", m=2048, n=1024, k=1024), -7),  # negative duration
        measurement(KernelConfig.make("linear", "bf16", m=4096, n=1024, k=1024), None),  # NaN duration
        measurement(KernelConfig.make("linear", "bf16", m=8192, n=1024, k=1024), 90_000, hardware="a100-sxm-80gb"),
        measurement(KernelConfig.make("add", "fp32", tokens=1024, hidden=1024), 9_000),
    ]
    pq.write_table(to_table(mixed), parts / "part-00001.parquet")
    pq.write_table(pa.table({"kernel": ["x"], "time_ms": [1.0]}), parts / "part-00002.parquet")
    (parts / "part-00003.parquet").write_bytes(b"not a parquet file")
    return {"valid": len(GOOD_CONFIGS) + 2, "rejected_rows": 3, "rejected_files": 2}


def register(instance: dg.DagsterInstance, partitions: list[Partition], networks: list[NetworkPartition] = ()) -> None:
    instance.add_dynamic_partitions("hardware", sorted({p.hardware for p in partitions}))
    instance.add_dynamic_partitions("campaign", sorted({p.campaign for p in [*partitions, *networks]}))
    instance.add_dynamic_partitions("network", sorted({p.network for p in networks}))


def ingest_networks(
    instance: dg.DagsterInstance, resources: dict, networks: list[NetworkPartition]
) -> list[dg.ExecuteInProcessResult]:
    return [
        dg.materialize(
            [collectives.raw_collective_measurements, collectives.validated_collective_measurements],
            instance=instance,
            resources=resources,
            partition_key=network_partition_key(p),
        )
        for p in networks
    ]


def ingest(
    instance: dg.DagsterInstance, resources: dict, partitions: list[Partition]
) -> list[dg.ExecuteInProcessResult]:
    return [
        dg.materialize(
            [profiles.raw_kernel_profiles, profiles.validated_kernel_profiles],
            instance=instance,
            resources=resources,
            partition_key=partition_key(p),
        )
        for p in partitions
    ]


def downstream(instance: dg.DagsterInstance, resources: dict) -> dg.ExecuteInProcessResult:
    return dg.materialize(
        DOWNSTREAM,
        instance=instance,
        resources=resources,
        run_config={"ops": {"kernel_estimators": {"config": TRAINING}}},
    )


def query(warehouse: Path, sql: str, params: list | None = None) -> list[tuple]:
    con = duckdb.connect(str(warehouse), read_only=True)
    try:
        return con.execute(sql, params or []).fetchall()
    finally:
        con.close()


def metadata(result: dg.ExecuteInProcessResult, asset: str) -> dict:
    events = [e for e in result.get_asset_materialization_events() if e.asset_key.to_user_string() == asset]
    return {k: v.value for k, v in events[-1].materialization.metadata.items()}


@dataclass
class Graph:
    home: Path
    instance: dg.DagsterInstance
    resources: dict
    partitions: list[Partition]
    networks: list[NetworkPartition]
    expected: dict
    ingested: list[dg.ExecuteInProcessResult]
    result: dg.ExecuteInProcessResult

    @property
    def warehouse(self) -> Path:
        return self.home / "warehouse.duckdb"


@pytest.fixture(scope="module")
def graph(tmp_path_factory) -> Graph:
    """The whole asset graph, materialized once in a temporary MAYA_HOME (default warehouse resource)."""
    home = tmp_path_factory.mktemp("pipeline_home")
    expected = write_campaign(home / "profiles")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("MAYA_HOME", str(home))
        env.delenv("MAYA_WAREHOUSE", raising=False)
        resources = {
            "warehouse": Warehouse(),
            "data": DataSources(profiles_dir=str(home / "profiles"), ground_truth_dir=str(home / "ground_truth")),
        }
        partitions, networks = find_partitions(resources["data"]), find_network_partitions(resources["data"])
        instance = dg.DagsterInstance.ephemeral()
        register(instance, partitions, networks)
        ingested = ingest(instance, resources, partitions) + ingest_networks(instance, resources, networks)
        result = downstream(instance, resources)
    resources["warehouse"] = Warehouse(path=str(home / "warehouse.duckdb"))  # pinned: tests change MAYA_HOME
    return Graph(home, instance, resources, partitions, networks, expected, ingested, result)


def test_campaigns_train_as_their_source():
    """Vidur's and NeuSight's campaigns train under the shipped sources' names (the GEMM references answer to
    Vidur's); a profiling campaign is never taken for one of them, whatever it is called."""
    assert estimators.training_source(VIDUR_COMPUTE_CAMPAIGN) == "vidur"
    assert estimators.training_source("neusight-train") == "neusight"
    assert estimators.training_source(CAMPAIGN.campaign) == f"profiles:{CAMPAIGN.campaign}"
    assert estimators.training_source("vidur") == "profiles:vidur"


def test_definitions_load_from_the_defs_folder():
    assets = {k.to_user_string() for k in defs.resolve_asset_graph().get_all_asset_keys()}
    assert assets == {
        "raw_kernel_profiles",
        "validated_kernel_profiles",
        "kernel_estimators",
        "estimator_validation",
        "validation_suite",
        "accuracy_dashboard",
        "raw_collective_measurements",
        "validated_collective_measurements",
        "raw_public_kernels",
        "validated_public_kernels",
    }
    assert {j.name for j in defs.resolve_all_job_defs()} >= {
        "ingest_profiles",
        "ingest_collectives",
        "ingest_public_kernels",
        "profiling_campaign",
        "validate_estimators",
        "retrain_estimators",
    }
    assert {s.name for s in defs.schedules} == {"nightly_validation", "weekly_retrain", "nightly_profiling_campaign"}
    assert {s.name for s in defs.sensors} == {"profile_campaigns"}
    assert [k.name for k in defs.resolve_asset_graph().asset_check_keys] == ["end_to_end_error_within_5_percent"]
    assert set(defs.resources) == {"warehouse", "data"}


@pytest.mark.slow
def test_whole_graph_fills_the_warehouse(graph):
    assert all(r.success for r in graph.ingested) and graph.result.success
    neusight = sorted(p.hardware for p in graph.partitions if p.campaign == NEUSIGHT_CAMPAIGN)
    assert neusight == ["a100-pcie-40gb", "p100-pcie-16gb", "p4", "t4", "v100-pcie-32gb"]
    vidur = sorted(p.hardware for p in graph.partitions if p.campaign == VIDUR_COMPUTE_CAMPAIGN)
    assert vidur == ["a100-sxm-80gb", "a40", "h100-sxm"]  # every device of Vidur's data is in the catalog
    assert CAMPAIGN in graph.partitions
    train = load_kernels(neusight_dir() / "kernels_train.parquet")
    compute = load_compute()
    rows = dict(query(graph.warehouse, "SELECT campaign, count(*) FROM kernel_profiles GROUP BY 1"))
    assert rows == {
        NEUSIGHT_CAMPAIGN: len(train),
        VIDUR_COMPUTE_CAMPAIGN: len(compute.calls),
        CAMPAIGN.campaign: graph.expected["valid"],
    }
    timings = dict(
        query(graph.warehouse, "SELECT campaign, string_agg(DISTINCT timing) FROM kernel_profiles GROUP BY 1")
    )
    assert timings == {
        NEUSIGHT_CAMPAIGN: "isolated",
        VIDUR_COMPUTE_CAMPAIGN: "device",  # NeuSight timed calls alone
        CAMPAIGN.campaign: "device",
    }
    partitions = query(graph.warehouse, "SELECT count(*), sum(rows), sum(files) FROM profile_partitions")[0]
    assert partitions == (9, len(train) + len(compute.calls) + graph.expected["valid"], 5 + 3 + 4)
    assert query(graph.warehouse, "SELECT count(*) FROM profile_files")[0][0] == 5 + 3 + 4
    vidur_left_out = sum(
        metadata(r, "validated_kernel_profiles")["left_out"].get(
            "add of a parallel block (no post-attention norm): two add kernels in one measurement", 0
        )
        for p, r in zip(graph.partitions, graph.ingested)
        if p.campaign == VIDUR_COMPUTE_CAMPAIGN
    )
    assert vidur_left_out == sum(compute.left_out.values()) > 0  # phi-2's adds: counted, not silently dropped
    assert sorted(p.network for p in graph.networks) == [
        "a100_dgx",
        "a100_pairwise_nvlink",
        "a40_pairwise_nvlink",
        "h100_pairwise_nvlink",
    ]
    collective_rows = dict(
        query(graph.warehouse, "SELECT network || '/' || collective, count(*) FROM collective_measurements GROUP BY 1")
    )
    assert sum(collective_rows.values()) == len(pd.read_parquet(data_dir() / "vidur" / "collectives.parquet"))
    assert collective_rows["a40_pairwise_nvlink/sendrecv"] == 1988 and "a100_dgx/allreduce" in collective_rows

    versions = query(graph.warehouse, "SELECT version, training_rows FROM estimator_versions")
    assert versions == [("v1", TRAINING["sample_rows"])]
    assert metadata(graph.result, "kernel_estimators")["reused"] is False
    references = Registry(graph.warehouse).gemm_references("v1")  # Vidur's campaign trained as Vidur's rows
    assert references.learned_from and all("vidur" in names for names in references.learned_from.values())
    assert metadata(graph.result, "kernel_estimators")["gemm_references"] == references.ratios() != "none"
    test = load_kernels(neusight_dir() / "kernels_test.parquet")
    kernel_rows, kernel_mape, workloads = query(
        graph.warehouse, "SELECT kernel_rows, kernel_mape, workloads FROM estimator_evaluations WHERE version = 'v1'"
    )[0]
    assert (kernel_rows, workloads) == (len(test), 0) and 0 < kernel_mape < 1
    families = dict(query(graph.warehouse, "SELECT family, sum(rows) FROM kernel_errors GROUP BY 1"))
    assert families == test.groupby("family").size().to_dict()

    (check,) = graph.result.get_asset_check_evaluations()
    assert not check.passed and check.severity == dg.AssetCheckSeverity.WARN
    assert check.metadata["status"].value == "no ground truth available"
    page = (graph.home / "dashboard" / "accuracy.html").read_text(encoding="utf-8")
    assert all(f'id="{plot}"' in page for plot in PLOTS) and page.count('class="plotly-graph-div"') == len(PLOTS)
    assert (
        "no validation suite has been run for this version" in page and "<script src=" not in page
    )  # plotly.js inlined


@pytest.mark.slow
def test_bad_files_and_rows_are_quarantined_and_the_rest_of_the_partition_goes_on(graph):
    campaign_result = graph.ingested[graph.partitions.index(CAMPAIGN)]
    assert metadata(campaign_result, "validated_kernel_profiles")["left_out"] == {"configs with status unsupported": 1}
    rows = query(
        graph.warehouse,
        "SELECT regexp_extract(path, 'part-\\d+'), row_index, reason, record FROM quarantine ORDER BY path, row_index",
    )
    by_file = {(part, index): (reason, record) for part, index, reason, record in rows}
    assert len(rows) == graph.expected["rejected_rows"] + graph.expected["rejected_files"]
    assert "missing column(s) op, dtype, status, median_ns" in by_file[("part-00002", None)][0]
    assert "not a readable Parquet file" in by_file[("part-00003", None)][0]
    assert by_file[("part-00001", 1)][0] == "measured_ns: greater_than(0) (-7.0)"
    assert by_file[("part-00001", 2)][0] == "measured_ns: required (missing)"
    assert "not the partition's h100-sxm ('a100-sxm-80gb')" in by_file[("part-00001", 3)][0]
    # the record is the row as the estimators read it: linear's 2048 rows are the call frame's n (cuBLAS sizes)
    assert json.loads(by_file[("part-00001", 1)][1])["n"] == 2048.0
    kept = query(
        graph.warehouse,
        "SELECT regexp_extract(path, 'part-\\d+'), row_index FROM kernel_profiles WHERE campaign = ? ORDER BY 1, 2",
        [CAMPAIGN.campaign],
    )
    assert kept == [("part-00000", i) for i in range(len(GOOD_CONFIGS))] + [("part-00001", 0), ("part-00001", 4)]
    families = dict(
        query(graph.warehouse, "SELECT op, family FROM kernel_profiles WHERE campaign = ?", [CAMPAIGN.campaign])
    )
    assert families == {
        "linear": "gemm",
        "bmm": "gemm",
        "mm": "gemm",
        "sdpa_fwd": "attention",
        "layer_norm_fwd": "normalization",
        "softmax_fwd": "softmax",
        "add": "elementwise",
        "cross_entropy_fwd": "reduction",
        "embedding_fwd": "embedding",
        "adamw_fused": "optimizer",
        "memcpy_d2d": "copy",
        "copy_cast": "copy",
    }


@pytest.mark.slow
def test_campaign_measurements_become_calls_the_estimators_price():
    calls = measurement_calls(to_table([measurement(c, 1_000) for c in GOOD_CONFIGS]).to_pandas())
    by_op = calls.set_index("op")
    assert by_op.loc["sdpa_fwd", ["batch", "m", "n", "k"]].tolist() == [4 * 16, 2048, 2048, 128]
    assert by_op.loc["bmm", ["batch", "m", "n", "k"]].tolist() == [32, 512, 512, 64]
    assert (by_op.loc["mm", "dtype"], by_op.loc["linear", "dtype"]) == ("tf32", "bf16")
    assert by_op.loc["softmax_fwd", ["numel", "row"]].tolist() == [8192 * 50304, 50304]
    assert by_op.loc["cross_entropy_fwd", ["numel", "row"]].tolist() == [8192 * 50304, 50304]
    assert by_op.loc["layer_norm_fwd", ["numel", "row", "operands"]].tolist() == [8192 * 4096, 4096, 1]
    assert by_op.loc["add", "operands"] == 2 and by_op.loc["adamw_fused", "numel"] == 12582912
    assert by_op.loc["memcpy_d2d", "bytes"] == 1 << 26 and (calls["measured_ns"] == 1_000).all()
    priced = KernelEstimator().predict(calls.assign(hardware="h100-sxm"))
    # With no model trained, attention is composed from its products and every other family is a roofline.
    method = priced.set_index(calls["op"])["method"]
    assert (priced["roofline_ns"] > 1).all() and method["sdpa_fwd"] == "composed"
    assert (method.drop("sdpa_fwd") == "roofline").all()


@pytest.mark.slow  # the whole graph's first materialisation: ~7 s
def test_rerunning_with_unchanged_inputs_changes_nothing(graph):
    names = (
        "profile_files",
        "profile_partitions",
        "kernel_profiles",
        "quarantine",
        "estimator_versions",
        "estimator_aliases",
        "estimator_evaluations",
        "kernel_errors",
        "kernel_predictions",
    )

    def contents() -> dict:
        return {t: query(graph.warehouse, f"SELECT count(*), sum(hash(t)::HUGEINT) FROM {t} t") for t in names}

    before = contents()
    page = graph.home / "dashboard" / "accuracy.html"
    stamp = page.stat().st_mtime_ns
    again = ingest(graph.instance, graph.resources, [CAMPAIGN]) + [downstream(graph.instance, graph.resources)]
    assert metadata(again[0], "raw_kernel_profiles")["changed"] is False
    assert metadata(again[0], "validated_kernel_profiles")["changed"] is False
    assert metadata(again[1], "kernel_estimators")["reused"] is True
    assert metadata(again[1], "estimator_validation")["evaluated_now"] == "none (inputs unchanged)"
    assert metadata(again[1], "accuracy_dashboard")["changed"] is False and page.stat().st_mtime_ns == stamp
    assert contents() == before


@pytest.fixture
def small(tmp_path) -> tuple[dg.DagsterInstance, dict, Path]:
    """The campaign alone (no NeuSight) in its own warehouse."""
    write_campaign(tmp_path / "profiles")
    resources = {
        "warehouse": Warehouse(path=str(tmp_path / "w.duckdb")),
        "data": DataSources(profiles_dir=str(tmp_path / "profiles"), neusight=False, vidur=False),
    }
    instance = dg.DagsterInstance.ephemeral()
    register(instance, [CAMPAIGN])
    return instance, resources, tmp_path


KILLED_MIDWAY = """
import os, signal, sys
import dagster as dg
from maya.pipelines import landing, tables
from maya.pipelines.defs import profiles
from maya.pipelines.partitions import partition_key
from maya.pipelines.resources import DataSources, Warehouse
from maya.pipelines.sources import Partition

def insert(con, table, frame):  # killed once the partition's old rows are deleted and new ones inserted
    if table == "quarantine":
        os.kill(os.getpid(), signal.SIGKILL)
    tables.insert(con, table, frame)

landing.insert = insert  # where both raw-data assets write
partition, root = Partition(*sys.argv[1:3]), sys.argv[3]
instance = dg.DagsterInstance.ephemeral()
instance.add_dynamic_partitions("hardware", [partition.hardware])
instance.add_dynamic_partitions("campaign", [partition.campaign])
dg.materialize([profiles.validated_kernel_profiles], instance=instance, partition_key=partition_key(partition),
               resources={"warehouse": Warehouse(path=root + "/w.duckdb"),
                          "data": DataSources(profiles_dir=root + "/profiles", neusight=False)})
"""


@pytest.mark.slow
def test_a_run_killed_midway_leaves_the_partition_as_it_was(small):
    instance, resources, root = small
    ingest(instance, resources, [CAMPAIGN])
    warehouse = root / "w.duckdb"
    state = (
        "SELECT (SELECT count(*) FROM kernel_profiles), (SELECT count(*) FROM quarantine), "
        "(SELECT content_hash FROM profile_partitions)"
    )
    before = query(warehouse, state)
    (root / "profiles" / CAMPAIGN.hardware / CAMPAIGN.campaign / "measurements" / "part-00002.parquet").unlink()
    killed = subprocess.run(
        [sys.executable, "-c", KILLED_MIDWAY, CAMPAIGN.hardware, CAMPAIGN.campaign, str(root)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert killed.returncode == -9, killed.stderr[-2000:]
    assert query(warehouse, state) == before
    ingest(instance, resources, [CAMPAIGN])  # the next run applies the change
    after = query(warehouse, state)[0]
    assert after[:2] == (before[0][0], before[0][1] - 1) and after[2] != before[0][2]


def test_sensor_registers_new_campaigns_and_requests_changed_partitions(small):
    instance, resources, root = small
    data = resources["data"]
    instance.delete_dynamic_partition("hardware", CAMPAIGN.hardware)
    instance.delete_dynamic_partition("campaign", CAMPAIGN.campaign)
    first = sensors.profile_campaigns(dg.build_sensor_context(instance=instance, resources={"data": data}))
    assert sorted((r.job_name, r.partition_key) for r in first.run_requests) == sorted(
        [("ingest_profiles", str(partition_key(CAMPAIGN)))]
        + [("ingest_public_kernels", source) for source in PUBLIC_KERNEL_SOURCES]  # shipped: first seen now
    )
    assert sorted((r.partitions_def_name, r.partition_keys) for r in first.dynamic_partitions_requests) == [
        ("campaign", [CAMPAIGN.campaign]),
        ("hardware", [CAMPAIGN.hardware]),
    ]
    register(instance, [CAMPAIGN])
    again = sensors.profile_campaigns(
        dg.build_sensor_context(instance=instance, cursor=first.cursor, resources={"data": data})
    )
    assert again.run_requests == [] and again.dynamic_partitions_requests == []
    new = Partition(CAMPAIGN.hardware, "kernels-2026-02")
    parts = root / "profiles" / new.hardware / new.campaign / "measurements"
    parts.mkdir(parents=True)
    pq.write_table(to_table([measurement(GOOD_CONFIGS[0], 12_345)]), parts / "part-00000.parquet")
    grown = sensors.profile_campaigns(
        dg.build_sensor_context(instance=instance, cursor=again.cursor, resources={"data": data})
    )
    assert [r.partition_key for r in grown.run_requests] == [str(partition_key(new))]
    assert [(r.partitions_def_name, r.partition_keys) for r in grown.dynamic_partitions_requests] == [
        ("campaign", [new.campaign])
    ]
    job = defs.resolve_job_def("ingest_profiles")
    assert job.partitions_def == profiles.validated_kernel_profiles.partitions_def


def test_profiling_campaign_skips_with_a_clear_message_without_a_gpu(small):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this host has a GPU: the campaign would run")
    instance, resources, root = small
    result = campaign.profiling_campaign.execute_in_process(instance=instance, resources={"data": resources["data"]})
    assert result.success
    assert result.output_for_node("profile_kernels") == (
        "skipped: no CUDA device on this code location's host (torch.cuda.is_available() is False)"
    )
    skipped = campaign.nightly_profiling_campaign(dg.build_schedule_context(instance=instance))
    assert isinstance(skipped, dg.SkipReason) and "no CUDA device" in skipped.skip_message
    assert sorted(p.name for p in (root / "profiles" / CAMPAIGN.hardware).iterdir()) == [CAMPAIGN.campaign]


def gpt_like_trace(path: Path) -> Path:
    from maya.simulator.trace_builder import TraceBuilder

    builder = TraceBuilder(world_size=1)
    rank = builder.rank(0)
    for iteration in range(4):
        rank.iteration = iteration
        for m in (2048, 4096, 8192):
            rank.gemm(m, 4096, 4096, 1_000_000)
        rank.stream_sync()
    return builder.write(path)


def write_ground_truth(root: Path, ratios: dict[str, float], version: str, warehouse: Path) -> None:
    """Workloads whose measured iteration time is `ratio` x what `version` predicts."""
    for name, ratio in ratios.items():
        trace = gpt_like_trace(root / "h100-sxm" / "traces" / name)
        predicted = ground_truth.predict_iteration_ns(
            ground_truth.Workload("h100-sxm", name, 0.0, trace), version, warehouse
        )
        write_result(
            root / "h100-sxm",
            {
                "name": name,
                "workload": "gpt",
                "config": "{}",
                "status": "ok",
                "hardware": "h100-sxm",
                "median_ns": round(predicted * ratio),
                "trace_path": f"traces/{name}",
            },
        )


@pytest.mark.parametrize(
    "ratios, passed", [({"gpt-a": 1.02, "gpt-b": 0.97}, True), ({"gpt-a": 1.02, "gpt-c": 1.5}, False)]
)
@pytest.mark.slow
def test_end_to_end_check_against_ground_truth(graph, tmp_path, ratios, passed):
    home = tmp_path / "home"
    shutil.copytree(graph.home, home, ignore=shutil.ignore_patterns("profiles", "dashboard"))
    warehouse = home / "warehouse.duckdb"
    write_ground_truth(tmp_path / "gt", ratios, "v1", warehouse)
    resources = {
        "warehouse": Warehouse(path=str(warehouse)),
        "data": DataSources(profiles_dir=str(tmp_path / "none"), ground_truth_dir=str(tmp_path / "gt")),
    }
    result = dg.materialize(DOWNSTREAM[1:3], instance=graph.instance, resources=resources)
    (check,) = result.get_asset_check_evaluations()
    assert check.passed is passed and check.severity == dg.AssetCheckSeverity.ERROR
    assert check.metadata["workloads"].value == 2 and check.metadata["failed_predictions"].value == 0
    errors = {name: abs(1 - r) / r for name, r in ratios.items()}  # |predicted - measured| / measured
    assert check.metadata["mean_error"].value == pytest.approx(sum(errors.values()) / 2, rel=1e-3)
    worst = max(errors, key=errors.get)
    assert check.metadata["worst_workload"].value.startswith(f"{worst} on h100-sxm")
    assert query(warehouse, "SELECT count(*) FROM workload_predictions WHERE version = 'v1'")[0][0] == 2


@pytest.mark.parametrize("errors, passed", [((2.0, -3.0), True), ((2.0, -30.0), False)])
@pytest.mark.slow
def test_end_to_end_check_judges_the_validation_suites(graph, tmp_path, errors, passed):
    """Suite rows stored by `maya validate` are the end-to-end ground truth the 5% check judges."""
    from maya.validation import load_suite, store
    from maya.validation.plan import predictor_digest

    home = tmp_path / "home"
    shutil.copytree(graph.home, home, ignore=shutil.ignore_patterns("profiles", "dashboard"))
    warehouse = home / "warehouse.duckdb"
    suite = load_suite("llm-foundry-smoke")
    for row, error in zip((20, 81), errors):
        measured = float(suite.table.loc[row, "step_time_s_derived"])
        store.save(
            store.RowResult(
                suite.name,
                suite.digest,
                suite.kind,
                store.RowKey(row, f"row {row}", "h100_80gb", "1b", 8, measured),
                "v1",
                predictor_digest(),
                status="ok",
                hardware="h100-sxm",
                predicted_s=measured * (1 + error / 100),
                error_pct=error,
            ),
            warehouse,
        )
    resources = {
        "warehouse": Warehouse(path=str(warehouse)),
        "data": DataSources(profiles_dir=str(tmp_path / "none"), ground_truth_dir=str(tmp_path / "gt")),
    }
    result = dg.materialize(DOWNSTREAM[1:3], instance=graph.instance, resources=resources)
    (check,) = result.get_asset_check_evaluations()
    assert check.passed is passed and check.severity == dg.AssetCheckSeverity.ERROR
    assert (check.metadata["workloads"].value, check.metadata["suite_rows"].value) == (0, 2)
    assert check.metadata["mean_error"].value == pytest.approx(sum(map(abs, errors)) / 200, rel=1e-6)
    assert check.metadata["worst_workload"].value.startswith("row 81 (row 81) on h100-sxm")
    assert metadata(result, "estimator_validation")["suite_rows"] == 2


READER = """
import sys, time
from pathlib import Path
from maya.cli import app
stop, args = Path(sys.argv[1]), sys.argv[2:]
while not stop.exists():
    code = app(args, standalone_mode=False)  # `maya sql ...`, again and again
    if code:
        print(f"exit code {code}", flush=True)
    time.sleep(0.1)
"""


def test_warehouse_from_before_the_timing_column_is_migrated(tmp_path):
    """kernel_profiles without `timing`: the column is added, NeuSight's rows marked as timed call by call."""
    warehouse = tmp_path / "old.duckdb"
    con = duckdb.connect(str(warehouse))
    con.execute(
        "CREATE TABLE profile_files (hardware VARCHAR NOT NULL, campaign VARCHAR NOT NULL, path VARCHAR NOT "
        "NULL, format VARCHAR NOT NULL, sha256 VARCHAR NOT NULL, bytes BIGINT NOT NULL)"
    )
    con.execute(
        "CREATE TABLE kernel_profiles (hardware VARCHAR NOT NULL, campaign VARCHAR NOT NULL, path VARCHAR NOT "
        "NULL, row_index BIGINT NOT NULL, family VARCHAR NOT NULL, op VARCHAR NOT NULL, dtype VARCHAR NOT NULL, "
        'batch DOUBLE, m DOUBLE, n DOUBLE, k DOUBLE, numel DOUBLE, "row" DOUBLE, operands DOUBLE, bytes DOUBLE, '
        "flops DOUBLE, measured_ns DOUBLE NOT NULL)"
    )
    con.execute(
        "INSERT INTO profile_files VALUES ('t4', 'neusight-train', 'n.parquet', 'neusight', 'x', 1), "
        "('t4', 'c1', 'm.parquet', 'measurements', 'y', 1)"
    )
    con.execute(
        "INSERT INTO kernel_profiles (hardware, campaign, path, row_index, family, op, dtype, measured_ns) "
        "VALUES ('t4', 'neusight-train', 'n.parquet', 0, 'gemm', 'bmm', 'fp32', 1e5), "
        "('t4', 'c1', 'm.parquet', 0, 'gemm', 'mm', 'fp32', 1e5)"
    )
    con.close()
    from maya.pipelines.resources import Warehouse

    with Warehouse(path=str(warehouse)).connect() as con:
        assert con.execute("SELECT campaign, timing FROM kernel_profiles ORDER BY 1").fetchall() == [
            ("c1", "device"),
            ("neusight-train", "isolated"),
        ]


@pytest.mark.slow
def test_maya_sql_reads_while_a_run_writes(tmp_path):
    """`maya sql` in another process, again and again while NeuSight's partitions are written: no error, and
    every answer is a committed state (the partitions table agrees with the rows) up to every row."""
    warehouse = tmp_path / "w.duckdb"
    resources = {
        "warehouse": Warehouse(path=str(warehouse)),
        "data": DataSources(profiles_dir=str(tmp_path / "none"), vidur=False),
    }
    partitions = find_partitions(resources["data"])
    with resources["warehouse"].connect():
        pass  # the tables exist before the first read
    instance = dg.DagsterInstance.ephemeral()
    register(instance, partitions)
    sql = (
        "SELECT (SELECT count(*) FROM kernel_profiles) AS n, (SELECT coalesce(sum(rows), 0) FROM "
        "profile_partitions) AS committed"
    )
    stop = tmp_path / "stop"
    reader = subprocess.Popen(
        [sys.executable, "-c", READER, str(stop), "sql", sql, "--format", "json", "--warehouse", str(warehouse)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert all(r.success for r in ingest(instance, resources, partitions))
    finally:
        stop.touch()
        out, err = reader.communicate(timeout=60)
    answers = [json.loads(line)[0] for line in out.splitlines() if line.startswith("[")]
    assert reader.returncode == 0 and err == "" and len(answers) == len(out.splitlines()) >= 5
    assert all(a["n"] == a["committed"] for a in answers)
    total = len(load_kernels(neusight_dir() / "kernels_train.parquet"))
    assert query(warehouse, "SELECT count(*) FROM kernel_profiles")[0][0] == total
    assert [a["n"] for a in answers] == sorted(a["n"] for a in answers)  # commits only add rows


def write_vidur(root: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Small Vidur files: a few real rows of each kind with bad ones among them."""
    compute = pd.read_parquet(data_dir() / "vidur" / "compute.parquet")
    compute = (
        compute[
            compute["model"].str.contains("Llama-2-7b")
            & (compute["tp"] == 1)
            & (compute["device"] == "NVIDIA H100 80GB HBM3")
            & (compute["num_tokens"] == 512)
        ]
        .drop_duplicates("op")
        .reset_index(drop=True)
    )
    compute = pd.concat([compute, compute.iloc[[0, 0, 0, 0, 0]].assign(num_tokens=1024)], ignore_index=True)
    gemm = compute.index[compute["gemm_m"].notna()][0]
    bad = {
        10: {"time_ms_median": -0.5},
        11: {"time_ms_median": np.nan},
        12: {"device": "NVIDIA H300"},
        13: {"op": "attn_softmax"},
    }
    for row, values in bad.items():
        for column, value in values.items():
            compute.loc[row, column] = value
    compute.loc[gemm, "gemm_m"] = pd.NA
    collective = pd.read_parquet(data_dir() / "vidur" / "collectives.parquet").groupby("network").head(3)
    collective = collective.reset_index(drop=True)
    collective.loc[0, "time_ms_median"] = 0.0
    collective.loc[1, "collective"] = "all_to_some"
    collective.loc[3, "devices_per_node"] = 16
    root.mkdir()
    compute.to_parquet(root / "compute.parquet")
    collective.to_parquet(root / "collectives.parquet")
    return compute, collective


@pytest.mark.slow
def test_vidur_sources_quarantine_bad_rows_with_the_reason_and_rerun_idempotently(tmp_path):
    compute, collective = write_vidur(tmp_path / "vidur")
    resources = {
        "warehouse": Warehouse(path=str(tmp_path / "w.duckdb")),
        "data": DataSources(profiles_dir=str(tmp_path / "none"), neusight=False, vidur_dir=str(tmp_path / "vidur")),
    }
    partitions, networks = find_partitions(resources["data"]), find_network_partitions(resources["data"])
    assert partitions == [
        Partition("h100-sxm", VIDUR_COMPUTE_CAMPAIGN),
        Partition("nvidia-h300", VIDUR_COMPUTE_CAMPAIGN),
    ]
    assert [p.network for p in networks] == sorted(collective["network"].unique())
    assert {p.campaign for p in networks} == {VIDUR_COLLECTIVES_CAMPAIGN}
    instance = dg.DagsterInstance.ephemeral()
    register(instance, partitions, networks)
    first = ingest(instance, resources, partitions) + ingest_networks(instance, resources, networks)
    assert all(r.success for r in first)
    warehouse = tmp_path / "w.duckdb"
    reasons = dict(query(warehouse, "SELECT row_index, reason FROM quarantine ORDER BY 1"))
    assert reasons == {
        10: "time_ms_median: not positive (-0.5)",
        11: "time_ms_median: required (missing)",
        12: "device: not in the hardware catalog ('NVIDIA H300')",
        13: "op: not a Vidur operator (attn_pre_proj, attn_post_proj, mlp_up_proj, mlp_down_proj, "
        "input_layernorm, post_attention_layernorm, attn_rope, mlp_act, add, emb) ('attn_softmax')",
        int(
            compute.index[compute["gemm_m"].isna() & compute["op"].str.contains("proj")][0]
        ): "gemm_m, gemm_n, gemm_k: missing for a GEMM operator",
    }
    assert query(warehouse, "SELECT count(*) FROM kernel_profiles")[0][0] == len(compute) - 5
    assert query(warehouse, "SELECT DISTINCT timing, hardware FROM kernel_profiles") == [("device", "h100-sxm")]
    collective_reasons = dict(query(warehouse, "SELECT row_index, reason FROM collective_quarantine"))
    assert collective_reasons[0] == "time_ms_median: not positive (0.0)"
    assert collective_reasons[1].startswith("collective: not a collective (allreduce")
    assert "devices_per_node: more than the node's max_devices_per_node" in collective_reasons[3]
    assert query(warehouse, "SELECT count(*) FROM collective_measurements")[0][0] == len(collective) - 3
    again = ingest(instance, resources, partitions) + ingest_networks(instance, resources, networks)
    assert all(
        metadata(r, asset)["changed"] is False
        for r in again
        for asset in ("validated_kernel_profiles", "validated_collective_measurements")
        if any(e.asset_key.to_user_string() == asset for e in r.get_asset_materialization_events())
    )


@pytest.mark.slow
def test_sensor_registers_vidur_devices_and_networks_and_requests_their_ingestion(tmp_path):
    write_vidur(tmp_path / "vidur")
    data = DataSources(profiles_dir=str(tmp_path / "none"), neusight=False, vidur_dir=str(tmp_path / "vidur"))
    instance = dg.DagsterInstance.ephemeral()
    first = sensors.profile_campaigns(dg.build_sensor_context(instance=instance, resources={"data": data}))
    jobs = sorted((r.job_name, r.partition_key) for r in first.run_requests)
    networks = find_network_partitions(data)
    assert jobs == sorted(
        [("ingest_profiles", str(partition_key(p))) for p in find_partitions(data)]
        + [("ingest_collectives", str(network_partition_key(p))) for p in networks]
        + [("ingest_public_kernels", source) for source in PUBLIC_KERNEL_SOURCES]
    )
    added = {r.partitions_def_name: r.partition_keys for r in first.dynamic_partitions_requests}
    assert added["network"] == [p.network for p in networks]
    assert added["campaign"] == [VIDUR_COLLECTIVES_CAMPAIGN, VIDUR_COMPUTE_CAMPAIGN]
    assert (
        defs.resolve_job_def("ingest_collectives").partitions_def
        == collectives.validated_collective_measurements.partitions_def
    )
