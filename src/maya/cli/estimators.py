"""`maya estimators`: train, list, show and evaluate versions of the kernel estimators."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from .common import fail, out

estimators_app = typer.Typer(help="Train, list, inspect and evaluate kernel runtime estimators.",
                             no_args_is_help=True)
WarehouseOption = Annotated[Optional[Path], typer.Option(help="Warehouse file (default $MAYA_WAREHOUSE or "
                                                              "$MAYA_HOME/warehouse.duckdb).")]


def _pct(value) -> str:
    return "-" if value is None or value != value else f"{value:.1%}"


@estimators_app.command("train")
def train_cmd(profiles: Annotated[Optional[Path], typer.Option(help="Folder of measured runs "
                                                                   "(default data/profiles).")] = None,
              neusight: Annotated[bool, typer.Option(help="Include NeuSight's measured kernels.")] = True,
              sample: Annotated[Optional[int], typer.Option(help="Train on a random sample of this many rows.")] = None,
              trees: Annotated[Optional[int], typer.Option(help="Trees per model (default: the tuned "
                                                                "setting).")] = None,
              depth: Annotated[Optional[int], typer.Option(help="Tree depth (default: the tuned setting).")] = None,
              warehouse: WarehouseOption = None):
    """Train on the shipped measurements and register a version (an existing one when this data and
    configuration were already trained on)."""
    from maya.estimators import Registry, TrainConfig, train_version
    from maya.estimators.efficiency_model import ModelParams
    from maya.estimators.training_data import shipped_measurements

    if profiles is not None and not profiles.is_dir():
        fail(f"{profiles}: no such directory")
    measurements = shipped_measurements(neusight=neusight, profiles=profiles)
    if measurements.empty:
        fail("no measurements to train on (NeuSight excluded and no measured runs found)")
    if sample is not None and sample < len(measurements):
        measurements = measurements.sample(sample, random_state=0).reset_index(drop=True)
    chosen = {k: v for k, v in (("n_estimators", trees), ("max_depth", depth)) if v is not None}
    config = TrainConfig(params=ModelParams(**chosen))
    with out.status(f"training on {len(measurements):,} measured calls"):
        registered = train_version(measurements, config, Registry(warehouse))
    record = registered.record
    summary = f"estimator version [bold]{record.version}[/] ({record.training_rows:,} rows, " \
              f"hardware {', '.join(record.hardware)})"
    out.print(f"reused {summary}: same data and configuration" if registered.reused else f"registered {summary}")
    out.print(_family_table(record.metrics))


@estimators_app.command("list")
def list_cmd(warehouse: WarehouseOption = None):
    """Every registered version."""
    from maya.estimators import Registry

    registry = Registry(warehouse)
    versions, latest = registry.versions(), registry.latest()
    if not versions:
        out.print(f"no estimator versions in {registry.warehouse}; train one with `maya estimators train`")
        return
    table = Table("version", "created", "hardware", "families", "rows", "data hash")
    for r in versions:
        name = f"{r.version} (latest)" if r.version == latest else r.version
        table.add_row(name, f"{r.created_at:%Y-%m-%d %H:%M:%S}", ", ".join(r.hardware), ", ".join(r.families),
                      f"{r.training_rows:,}", r.data_hash[:12])
    out.print(table)


@estimators_app.command("show")
def show_cmd(version: Annotated[str, typer.Argument(help="Version (e.g. v3) or `latest`.")],
             warehouse: WarehouseOption = None):
    """A version's record, artifact and accuracy metrics."""
    from maya.estimators import Registry, RegistryError

    registry = Registry(warehouse)
    try:
        record = registry.get(version)
    except RegistryError as e:
        fail(str(e))
    table = Table(show_header=False)
    table.add_column("field")
    table.add_column("value", overflow="fold")
    for name, value in [("version", record.version), ("created", f"{record.created_at:%Y-%m-%d %H:%M:%S}"),
                        ("hardware", ", ".join(record.hardware)), ("families", ", ".join(record.families)),
                        ("training rows", f"{record.training_rows:,}"), ("data hash", record.data_hash),
                        ("config hash", record.config_hash),
                        ("artifact", str(registry.artifacts / record.artifact_path)),
                        ("artifact sha256", record.artifact_sha256), ("artifact bytes", f"{record.artifact_bytes:,}"),
                        ("maya", record.maya_version)]:
        table.add_row(name, value)
    out.print(table)
    out.print(_family_table(record.metrics))


@estimators_app.command("eval")
def eval_cmd(dataset: Annotated[Path, typer.Option(help="Parquet of measured kernels in NeuSight's columns "
                                                        "(op, device, latency_ms, b, m, n, k / b, h).")],
             version: Annotated[str, typer.Option(help="Version to evaluate.")] = "latest",
             warehouse: WarehouseOption = None):
    """MAPE of a version against measured kernels, per op and overall. NeuSight timed each call on its own
    (CUDA events around one eager call), so predictions are compared as such: device time plus dispatch."""
    import pandas as pd

    from maya.core import hardware
    from maya.estimators import Registry, RegistryError
    from maya.estimators import CallFrameError
    from maya.estimators.neusight_data import DatasetError, check_complete, to_calls
    from maya.estimators.evaluation import comparable_ns, mape_table

    if not dataset.is_file():
        fail(f"{dataset}: no such file")
    try:
        calls = to_calls(pd.read_parquet(dataset))
        if not calls.empty:
            check_complete(calls)
    except (DatasetError, OSError, ValueError) as e:
        fail(f"{dataset}: {e}")
    if calls.empty:
        fail(f"{dataset}: no rows of a known op (bmm, linear, elementwise ops, ln, softmax)")
    for device in calls["hardware"].unique():
        try:
            hardware.get(device)
        except hardware.UnknownHardware:
            fail(f"{dataset}: unknown device {device!r} (not in the hardware catalog; known: "
                  f"{', '.join(hardware.names())})")
    try:
        estimator = Registry(warehouse).load(version)
    except RegistryError as e:
        fail(str(e))
    try:
        predicted = estimator.predict(calls)
    except CallFrameError as e:
        fail(f"{dataset}: {e}")
    predicted = predicted.assign(measured_ns=calls["measured_ns"].to_numpy(),
                                 predicted_ns=comparable_ns(predicted, calls["timing"]))
    table = mape_table(predicted, "op", predictions=("predicted_ns", "roofline_ns"))
    shares = [c for c in table.columns if c.startswith("share_")]
    view = Table("op", "rows", "MAPE", "roofline MAPE", *[c.removeprefix("share_") for c in shares],
                 title=f"{dataset.name} against estimator {version}")
    for op, row in table.iterrows():
        view.add_row(str(op), f"{int(row['rows']):,}", _pct(row["mape_predicted_ns"]), _pct(row["mape_roofline_ns"]),
                     *[f"{row[c]:.0%}" for c in shares], end_section=op == table.index[-2])
    out.print(view)


def _family_table(metrics: dict) -> Table:
    table = Table("family", "rows", "GPUs", "validation MAPE", "unseen-architecture MAPE", "roofline MAPE",
                  title="per family (held-out training data)")
    for family, m in sorted(metrics.get("families", {}).items()):
        transfer = m.get("transfer_mape")
        if isinstance(transfer, dict):
            transfer = sum(transfer.values()) / len(transfer) if transfer else None
        table.add_row(family, f"{m['rows']:,}", str(len(m["hardware"])), _pct(m.get("validation_mape")),
                      _pct(transfer), _pct(m.get("roofline_mape")))
    return table
