"""Every warehouse table's DDL and the one ordered list of migrations, owned here for every package.

The tables belong to the packages that write them (named beside each group below), but their DDL is data
that needs nothing from those packages, so it lives in the bottom layer: any opener, whichever packages its
process imported, creates the same tables and migrates an older warehouse the same way
(`maya.core.warehouse.connect`), and a read-only opener shows a table the file lacks as an empty one
(`maya.core.warehouse.read_only`).

| table | owner | one row per |
|---|---|---|
| `runs` | `maya.core.warehouse` | registered trace |
| `predictions` | `maya.simulator.store` | `maya predict` |
| `searches`, `search_points` | `maya.search.log` | search; evaluated point of a search |
| `estimator_versions`, `estimator_aliases` | `maya.estimators.registry` | trained version; alias (`latest`) |
| `validation_rows` | `maya.validation.store` | suite content x row x estimator version x predictor digest |
| `profile_files` ... `workload_predictions` | `maya.pipelines.tables` | see that module |
"""

from __future__ import annotations

from dataclasses import dataclass

import duckdb

_PARTITION = "hardware VARCHAR NOT NULL, campaign VARCHAR NOT NULL, path VARCHAR NOT NULL"
_NETWORK = "network VARCHAR NOT NULL, campaign VARCHAR NOT NULL, path VARCHAR NOT NULL"
_SOURCE = "source VARCHAR NOT NULL, campaign VARCHAR NOT NULL, path VARCHAR NOT NULL"

TABLES: dict[str, str] = {
    # maya.core.warehouse: the catalog of runs
    "runs": """
    run_id        VARCHAR PRIMARY KEY,
    path          VARCHAR NOT NULL,
    source        VARCHAR NOT NULL,
    status        VARCHAR NOT NULL,
    hardware      VARCHAR,
    world_size    INTEGER NOT NULL,
    ranks         INTEGER NOT NULL,
    api_calls     BIGINT NOT NULL,
    ops           BIGINT NOT NULL,
    created_at    TIMESTAMP,
    registered_at TIMESTAMP NOT NULL""",
    # maya.simulator.store: one row per `maya predict`
    "predictions": """
    prediction_id           VARCHAR PRIMARY KEY,
    run_id                  VARCHAR NOT NULL,
    run_path                VARCHAR NOT NULL,
    created_at              TIMESTAMP NOT NULL,
    hardware                VARCHAR NOT NULL,
    durations               VARCHAR NOT NULL,
    world_size              INTEGER NOT NULL,
    simulated_ranks         INTEGER NOT NULL,
    iterations              INTEGER NOT NULL,
    steady_iterations       INTEGER NOT NULL,
    iteration_ms            DOUBLE NOT NULL,
    compute_ms              DOUBLE NOT NULL,
    exposed_comm_ms         DOUBLE NOT NULL,
    host_bound_ms           DOUBLE NOT NULL,
    idle_ms                 DOUBLE NOT NULL,
    mfu                     DOUBLE NOT NULL,
    peer_wait_ms            DOUBLE,
    hfu                     DOUBLE,
    peak_memory_bytes       BIGINT NOT NULL,
    memory_capacity_bytes   BIGINT NOT NULL,
    oom                     BOOLEAN NOT NULL,
    tokens_per_s            DOUBLE,
    price_per_gpu_hour      DOUBLE,
    cost_per_iteration      DOUBLE,
    cost_per_million_tokens DOUBLE,
    report                  JSON NOT NULL""",
    # maya.search.log: the resumable search log
    "searches": """
    search_id   VARCHAR PRIMARY KEY,
    space_hash  VARCHAR NOT NULL,
    command     VARCHAR NOT NULL,
    settings    VARCHAR NOT NULL,
    created_at  TIMESTAMP NOT NULL""",
    "search_points": """
    search_id          VARCHAR NOT NULL,
    point              VARCHAR NOT NULL,
    params             VARCHAR NOT NULL,
    seq                INTEGER NOT NULL,
    status             VARCHAR NOT NULL,
    source             VARCHAR NOT NULL,
    iteration_ns       DOUBLE,
    peak_memory_bytes  BIGINT,
    mfu                DOUBLE,
    hfu                DOUBLE,
    world_size         INTEGER,
    tokens_per_iteration DOUBLE,
    cost_per_iteration DOUBLE,
    objective          DOUBLE,
    reason             VARCHAR,
    command_hash       VARCHAR,
    prediction_hash    VARCHAR,
    trace_hash         VARCHAR,
    run_dir            VARCHAR,
    command            VARCHAR,
    seconds            DOUBLE,
    recorded_at        TIMESTAMP NOT NULL,
    PRIMARY KEY (search_id, point)""",
    # maya.estimators.registry: estimator versions and the `latest` alias
    "estimator_versions": """
    version         VARCHAR PRIMARY KEY,
    created_at      TIMESTAMP NOT NULL,
    data_hash       VARCHAR NOT NULL,
    config_hash     VARCHAR NOT NULL,
    hardware        VARCHAR[] NOT NULL,
    families        VARCHAR[] NOT NULL,
    training_rows   BIGINT NOT NULL,
    metrics         JSON NOT NULL,
    artifact_path   VARCHAR NOT NULL,
    artifact_sha256 VARCHAR NOT NULL,
    artifact_bytes  BIGINT NOT NULL,
    maya_version    VARCHAR NOT NULL""",
    "estimator_aliases": """
    alias   VARCHAR PRIMARY KEY,
    version VARCHAR NOT NULL""",
    # maya.validation.store: `maya validate` results
    "validation_rows": """
    suite                 VARCHAR NOT NULL,
    suite_digest          VARCHAR NOT NULL,
    kind                  VARCHAR NOT NULL,
    "row"                 INTEGER NOT NULL,
    label                 VARCHAR NOT NULL,
    gpu                   VARCHAR NOT NULL,
    size                  VARCHAR NOT NULL,
    gpus                  INTEGER NOT NULL,
    seq                   INTEGER,
    hardware              VARCHAR,
    cluster               VARCHAR,
    status                VARCHAR NOT NULL,
    reason                VARCHAR,
    measured_s            DOUBLE NOT NULL,
    predicted_s           DOUBLE,
    error_pct             DOUBLE,
    band_low_s            DOUBLE,
    band_high_s           DOUBLE,
    in_band               BOOLEAN,
    oom                   BOOLEAN,
    oom_reason            VARCHAR,
    peak_memory_bytes     BIGINT,
    memory_capacity_bytes BIGINT,
    mfu                   DOUBLE,
    estimator_version     VARCHAR NOT NULL,
    predictor_digest      VARCHAR NOT NULL,
    command_hash          VARCHAR,
    trace_digest          VARCHAR,
    trace_reused          BOOLEAN,
    emulate_s             DOUBLE,
    predict_s             DOUBLE,
    details               JSON,
    recorded_at           TIMESTAMP NOT NULL,
    PRIMARY KEY (suite_digest, "row", estimator_version, predictor_digest)""",
    # maya.pipelines.tables: measured data and estimator evaluations
    "profile_files": f"""
    {_PARTITION}, format VARCHAR NOT NULL, sha256 VARCHAR NOT NULL, bytes BIGINT NOT NULL,
    PRIMARY KEY (hardware, campaign, path)""",
    "profile_partitions": """
    hardware VARCHAR NOT NULL, campaign VARCHAR NOT NULL, content_hash VARCHAR NOT NULL, files INTEGER NOT NULL,
    rows BIGINT NOT NULL, quarantined BIGINT NOT NULL, PRIMARY KEY (hardware, campaign)""",
    "kernel_profiles": f"""
    {_PARTITION}, row_index BIGINT NOT NULL, family VARCHAR NOT NULL, op VARCHAR NOT NULL, dtype VARCHAR NOT NULL,
    batch DOUBLE, m DOUBLE, n DOUBLE, k DOUBLE, numel DOUBLE, "row" DOUBLE, operands DOUBLE, bytes DOUBLE,
    flops DOUBLE, measured_ns DOUBLE NOT NULL, timing VARCHAR NOT NULL DEFAULT 'device'""",
    "quarantine": f"""
    {_PARTITION}, row_index BIGINT, reason VARCHAR NOT NULL, record JSON""",
    "collective_files": f"""
    {_NETWORK}, format VARCHAR NOT NULL, sha256 VARCHAR NOT NULL, bytes BIGINT NOT NULL,
    PRIMARY KEY (network, campaign, path)""",
    "collective_partitions": """
    network VARCHAR NOT NULL, campaign VARCHAR NOT NULL, content_hash VARCHAR NOT NULL, files INTEGER NOT NULL,
    rows BIGINT NOT NULL, quarantined BIGINT NOT NULL, PRIMARY KEY (network, campaign)""",
    "collective_measurements": f"""
    {_NETWORK}, row_index BIGINT NOT NULL, collective VARCHAR NOT NULL, bytes DOUBLE NOT NULL, ranks INTEGER NOT NULL,
    nodes INTEGER NOT NULL, devices_per_node INTEGER NOT NULL, measured_ns DOUBLE NOT NULL""",
    "collective_quarantine": f"""
    {_NETWORK}, row_index BIGINT, reason VARCHAR NOT NULL, record JSON""",
    "public_kernel_files": f"""
    {_SOURCE}, format VARCHAR NOT NULL, sha256 VARCHAR NOT NULL, bytes BIGINT NOT NULL,
    PRIMARY KEY (source, campaign, path)""",
    "public_kernel_partitions": """
    source VARCHAR NOT NULL, campaign VARCHAR NOT NULL, content_hash VARCHAR NOT NULL, files INTEGER NOT NULL,
    rows BIGINT NOT NULL, quarantined BIGINT NOT NULL, PRIMARY KEY (source, campaign)""",
    "public_kernels": f"""
    {_SOURCE}, row_index BIGINT NOT NULL, row_id VARCHAR NOT NULL, dataset VARCHAR NOT NULL,
    device VARCHAR NOT NULL, kernel_impl VARCHAR NOT NULL, direction VARCHAR NOT NULL, dtype VARCHAR NOT NULL,
    causal BOOLEAN NOT NULL, head_dim DOUBLE, n_heads DOUBLE, batch DOUBLE, seqlen DOUBLE, m DOUBLE, n DOUBLE,
    k DOUBLE, groups DOUBLE, time_s DOUBLE NOT NULL, flops DOUBLE NOT NULL, source_repo VARCHAR NOT NULL,
    source_commit VARCHAR NOT NULL, licence VARCHAR NOT NULL""",
    "public_kernel_quarantine": f"""
    {_SOURCE}, row_index BIGINT, reason VARCHAR NOT NULL, record JSON""",
    "estimator_evaluations": """
    version VARCHAR NOT NULL, inputs_hash VARCHAR NOT NULL, kernel_rows BIGINT NOT NULL, kernel_mape DOUBLE,
    workloads INTEGER NOT NULL, workload_failures INTEGER NOT NULL, workload_mape DOUBLE,
    PRIMARY KEY (version)""",
    "kernel_errors": """
    version VARCHAR NOT NULL, hardware VARCHAR NOT NULL, family VARCHAR NOT NULL, rows BIGINT NOT NULL,
    mape DOUBLE NOT NULL""",
    "kernel_predictions": """
    version VARCHAR NOT NULL, hardware VARCHAR NOT NULL, family VARCHAR NOT NULL, op VARCHAR NOT NULL,
    method VARCHAR NOT NULL, measured_ns DOUBLE NOT NULL, predicted_ns DOUBLE NOT NULL""",
    "workload_predictions": """
    version VARCHAR NOT NULL, hardware VARCHAR NOT NULL, workload VARCHAR NOT NULL, measured_ns DOUBLE NOT NULL,
    predicted_ns DOUBLE, error VARCHAR""",
}
"""Table name -> its column definitions, as `CREATE TABLE name (...)` takes them."""


@dataclass(frozen=True)
class Migration:
    """A column added to a table after warehouses were written without it: `ALTER TABLE table ADD COLUMN
    column definition`, then `backfill` (statements that give the old rows their values)."""

    table: str
    column: str
    definition: str
    since: str
    """The date the column appeared."""
    backfill: tuple[str, ...] = ()


MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        "kernel_profiles",
        "timing",
        "VARCHAR NOT NULL DEFAULT 'device'",
        since="2026-11-21",
        backfill=(  # NeuSight's rows were timed call by call
            "UPDATE kernel_profiles SET timing = 'isolated' WHERE (hardware, campaign, path) IN "
            "(SELECT hardware, campaign, path FROM profile_files WHERE format = 'neusight')",
        ),
    ),
    Migration("validation_rows", "seq", "INTEGER", since="2026-11-25"),  # older rows: NULL
    # older rows: NULL (their exposed_comm_ms still holds the wait for peers; their mfu counted recomputation)
    Migration("predictions", "peer_wait_ms", "DOUBLE", since="2026-11-29"),
    Migration("predictions", "hfu", "DOUBLE", since="2026-11-29"),
    Migration("search_points", "hfu", "DOUBLE", since="2026-11-29"),  # older points: NULL
    # older points: NULL (never reused: their command hash used the one salt of before, so they are emulated again)
    Migration("search_points", "prediction_hash", "VARCHAR", since="2026-11-29"),
)
"""Every migration, oldest first. A migration runs on a warehouse whose table lacks its column; a table
created from `TABLES` already has every column, so none runs on it."""


def create_table(name: str, *, temporary: bool = False) -> str:
    """The `CREATE TABLE` statement of table `name` (a TEMP table when `temporary`)."""
    if name not in TABLES:
        raise KeyError(f"no warehouse table {name!r} (known: {', '.join(TABLES)})")
    kind = "TEMP TABLE" if temporary else "TABLE IF NOT EXISTS"
    return f"CREATE {kind} {name} ({TABLES[name]}\n)"


def columns(con: duckdb.DuckDBPyConnection) -> dict[str, set[str]]:
    """The columns of each table of the connection's current database."""
    rows = con.execute(
        "SELECT table_name, column_name FROM duckdb_columns() "
        "WHERE database_name = current_database() AND schema_name = 'main'"
    ).fetchall()
    found: dict[str, set[str]] = {}
    for table, column in rows:
        found.setdefault(table, set()).add(column)
    return found


def pending(con: duckdb.DuckDBPyConnection) -> tuple[list[str], list[Migration]]:
    """The tables the warehouse lacks and the migrations its existing tables still need."""
    found = columns(con)
    missing = [name for name in TABLES if name not in found]
    migrations = [m for m in MIGRATIONS if m.table in found and m.column not in found[m.table]]
    return missing, migrations
