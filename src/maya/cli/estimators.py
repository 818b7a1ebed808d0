"""`maya estimators`: train, list, show and evaluate versions of the kernel estimators."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Column, Table

from .common import CLUSTER, ESTIMATOR_VERSION, JSON, WAREHOUSE, command, err, fail, out

estimators_app = typer.Typer(help="Train, list, show and evaluate kernel runtime estimators.", no_args_is_help=True)


def _pct(value) -> str:
    return "-" if value is None or value != value else f"{value:.1%}"


@estimators_app.command("train")
def train_cmd(
    profiles: Annotated[Path | None, typer.Option(help="Folder of measured runs (default data/profiles).")] = None,
    neusight: Annotated[bool, typer.Option(help="Include NeuSight's measured kernels.")] = True,
    vidur: Annotated[bool, typer.Option(help="Include Vidur's measured operators.")] = True,
    sample: Annotated[int | None, typer.Option(help="Train on a random sample of this many rows.")] = None,
    trees: Annotated[int | None, typer.Option(help="Trees per model (default: the tuned setting).")] = None,
    depth: Annotated[int | None, typer.Option(help="Tree depth (default: the tuned setting).")] = None,
    warehouse: WAREHOUSE = None,
):
    """Train the estimators on every shipped source and register a version.

    The sources are NeuSight, Vidur and measured runs (it says which, with rows per source and device);
    when this data and configuration were already trained on, the existing version is reused.
    """
    import pandas as pd

    from maya.estimators import Registry, TrainConfig, train_version
    from maya.estimators.efficiency_model import ModelParams
    from maya.estimators.training_data import rows_by_source, shipped_sources

    if profiles is not None and not profiles.is_dir():
        fail(f"{profiles}: no such directory")
    sources = shipped_sources(neusight=neusight, vidur=vidur, profiles=profiles)
    frames = [s.calls if "source" in s.calls else s.calls.assign(source=s.name) for s in sources if len(s.calls)]
    if not frames:
        fail("no measurements to train on (every shipped source excluded and no measured runs found)")
    out.print(_sources_table(sources, rows_by_source(sources)))
    measurements = pd.concat(frames, ignore_index=True)
    if sample is not None and sample < len(measurements):
        measurements = measurements.sample(sample, random_state=0).reset_index(drop=True)
    chosen = {k: v for k, v in (("n_estimators", trees), ("max_depth", depth)) if v is not None}
    config = TrainConfig(params=ModelParams(**chosen))
    with out.status(f"training on {len(measurements):,} measured calls"):
        registered = train_version(measurements, config, Registry(warehouse))
    record = registered.record
    summary = (
        f"estimator version [bold]{record.version}[/] ({record.training_rows:,} rows, "
        f"hardware {', '.join(record.hardware)})"
    )
    out.print(f"reused {summary}: same data and configuration" if registered.reused else f"registered {summary}")
    out.print(_family_table(record.metrics))


def _sources_table(sources, rows) -> Table:
    """Rows per source and device; rows quarantined (never trained on) and left out, with why."""
    table = Table("source", "hardware", "rows", "quarantined (never trained on) / left out", title="training data")
    for _, row in rows.iterrows():
        table.add_row(
            row["source"], row["hardware"], f"{row['rows']:,}", f"{row['rejected']:,}" if row["rejected"] else "-"
        )
    for source in sources:
        if len(source.rejected):
            for reason, count in source.rejected["reason"].value_counts().head(5).items():
                table.add_row(source.name, "", "", f"{count:,}: {reason}")
        for kind, count in source.left_out.items():
            table.add_row(source.name, "", "", f"{count:,} left out: {kind}")
    return table


@estimators_app.command("list")
def list_cmd(warehouse: WAREHOUSE = None):
    """List every registered estimator version.

    With each version's GEMM reference ratios (`maya estimators show` says why, or why none).
    """
    from maya.estimators import Registry, RegistryError

    registry = Registry(warehouse)
    versions, latest = registry.versions(), registry.latest()
    if not versions:
        out.print(f"no estimator versions in {registry.warehouse}; train one with `maya estimators train`")
        return
    table = Table(
        Column("version", no_wrap=True), "created", "hardware", "families", "rows", "data hash", "GEMM reference"
    )
    for r in versions:
        name = f"{r.version} (latest)" if r.version == latest else r.version
        try:
            references = registry.gemm_references(r).ratios()
        except RegistryError:
            references = "artifact unreadable (`maya estimators show`)"
        table.add_row(
            name,
            f"{r.created_at:%Y-%m-%d %H:%M:%S}",
            ", ".join(r.hardware),
            ", ".join(r.families),
            f"{r.training_rows:,}",
            r.data_hash[:12],
            references,
        )
    out.print(table)


@estimators_app.command("show")
def show_cmd(
    version: Annotated[str, typer.Argument(metavar="VERSION", help="Version (e.g. v3) or `latest`.")],
    warehouse: WAREHOUSE = None,
):
    """Show a version's record, artifact, GEMM references and metrics.

    The GEMM references: each part's ratio, the public rows it is the median over, why the version has them (or
    none) and the sources its tensor-core GEMMs learned from.
    """
    from maya.estimators import Registry, RegistryError

    registry = Registry(warehouse)
    try:
        record = registry.get(version)
    except RegistryError as e:
        fail(str(e))
    table = Table(show_header=False)
    table.add_column("field")
    table.add_column("value", overflow="fold")
    for name, value in [
        ("version", record.version),
        ("created", f"{record.created_at:%Y-%m-%d %H:%M:%S}"),
        ("hardware", ", ".join(record.hardware)),
        ("families", ", ".join(record.families)),
        ("training rows", f"{record.training_rows:,}"),
        ("data hash", record.data_hash),
        ("config hash", record.config_hash),
        ("artifact", str(registry.artifacts / record.artifact_path)),
        ("artifact sha256", record.artifact_sha256),
        ("artifact bytes", f"{record.artifact_bytes:,}"),
        ("maya", record.maya_version),
        *_references_rows(registry, record),
    ]:
        table.add_row(name, value)
    out.print(table)
    out.print(_family_table(record.metrics))


def _references_rows(registry, record) -> list[tuple[str, str]]:
    """`show`'s rows on the version's GEMM references: each part's ratio, why (or why none) and the sources its
    tensor-core GEMMs learned from; the artifact's problem when it cannot be read."""
    from maya.estimators import RegistryError

    try:
        references = registry.gemm_references(record)
    except RegistryError as e:
        return [("GEMM references", f"unknown: {e}")]
    ratios = [
        f"{r.part}: {r.ratio:.3f}, median over {len(r.rows)} public cuBLAS rows ({', '.join(r.sources)})"
        for r in references.references
    ]
    sources = [f"{part}: {', '.join(names)}" for part, names in sorted(references.learned_from.items())]
    return [
        ("GEMM references", "\n".join(ratios) or "none"),
        ("GEMM references: why", references.note),
        ("tensor-core GEMMs learned from", "; ".join(sources) or "not recorded"),
    ]


@estimators_app.command("eval", cls=command({"--version": "--estimator-version"}))
def eval_cmd(
    dataset: Annotated[
        Path,
        typer.Option(
            help="Parquet of measurements in a layout Maya reads, told apart by "
            "its columns: NeuSight kernels (op, device, latency_ms, ...), "
            "Vidur compute (device, model, op, time_ms_median, ...) or "
            "Vidur collectives (network, collective, num_workers, ...); "
            "kernels-public (the shipped public kernel measurements) or one of their .csv files."
        ),
    ],
    estimator_version: ESTIMATOR_VERSION = "latest",
    cluster: CLUSTER = None,
    warehouse: WAREHOUSE = None,
    as_json: JSON = False,
):
    """Measure an estimator version's error (MAPE per op) on measurements.

    MAPE per collective for NCCL data. Kernels are compared as they were timed: NeuSight's calls timed one by
    one (device time plus dispatch), Vidur's as device time; collectives with the collective model of each
    network's cluster, or of --cluster for every row. kernels-public: MAPE per GPU, implementation and direction.
    --json prints {op: {rows, mape (percent)}} ({"<gpu>/<impl>/<direction>": ...} for kernels-public).
    """
    import json
    import sys

    from maya.estimators import Registry, RegistryError
    from maya.estimators.dataset_eval import KERNELS_PUBLIC, DatasetError, evaluate_file, evaluate_kernels_public

    public = str(dataset) == KERNELS_PUBLIC
    if not public and not dataset.is_file():
        fail(f"{dataset}: no such file (or {KERNELS_PUBLIC}, the shipped public kernel measurements)")

    def estimator():
        try:
            return Registry(warehouse).load(estimator_version)
        except RegistryError as e:
            fail(str(e))

    try:
        if public or dataset.suffix.lower() == ".csv":
            result = evaluate_kernels_public(None if public else [dataset], estimator)
        else:
            result = evaluate_file(dataset, estimator, cluster=cluster)
    except DatasetError as e:
        fail(str(e))
    except ValueError as e:  # an unusable cluster spec file
        fail(f"{cluster}: {e}" if cluster else str(e))
    for note in result.notes:
        err.print(f"[yellow]note:[/] {note}")
    if as_json:
        sys.stdout.write(json.dumps(result.to_json()) + "\n")
        return
    table = result.table
    shares = [c for c in table.columns if c.startswith("share_")]
    extra = ["roofline MAPE"] if "roofline_mape" in table else []
    signed = ["mean signed"] if "signed" in table else []
    view = Table(
        "gpu/implementation/direction" if result.layout == "kernels_public" else "op",
        "rows",
        "MAPE",
        *extra,
        *signed,
        *[c.removeprefix("share_") for c in shares],
        title=f"{dataset.name} ({result.layout})"
        + ("" if result.layout == "vidur_collectives" else f" against estimator {estimator_version}"),
    )
    for op, row in [*table.iterrows(), ("overall", result.overall)]:
        view.add_row(
            str(op),
            f"{int(row['rows']):,}",
            _pct(row["mape"]),
            *([_pct(row["roofline_mape"])] if extra else []),
            *([f"{row['signed']:+.1%}"] if signed else []),
            *[f"{row.get(c, 0.0):.0%}" for c in shares],
            end_section=op == table.index[-1],
        )
    out.print(view)


def _family_table(metrics: dict) -> Table:
    table = Table(
        "family (segment)",
        "rows",
        "GPUs",
        "validation MAPE (held out)",
        "unseen-GPU MAPE",
        "unseen-architecture MAPE",
        "roofline MAPE",
        title="per family (held-out training data)",
    )
    for family, m in sorted(metrics.get("families", {}).items()):
        split = m.get("validation_split")
        table.add_row(
            family,
            f"{m['rows']:,}",
            str(len(m["hardware"])),
            _pct(m.get("validation_mape")) + (f" ({split})" if split and "validation_mape" in m else ""),
            _pct(_mean(m.get("unseen_gpu_mape"))),
            _pct(_mean(m.get("transfer_mape"))),
            _pct(m.get("roofline_mape")),
        )
    return table


def _mean(per_gpu: float | dict | None) -> float | None:
    """A per-GPU MAPE's mean over the GPUs held out."""
    if isinstance(per_gpu, dict):
        return sum(per_gpu.values()) / len(per_gpu) if per_gpu else None
    return per_gpu
