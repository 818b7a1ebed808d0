"""The accuracy dashboard: one static HTML file (plotly, inlined: it works offline) built from the
warehouse's evaluation tables, next to the warehouse at `dashboard/accuracy.html`.

Plots: predicted vs measured per hardware, error distribution per kernel family, error over estimator
versions against the 5% target, and a table of the latest version's predictions.
"""
from __future__ import annotations

import html
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pandas as pd
import plotly.graph_objects as go
import plotly.io as pio
from plotly.offline import get_plotlyjs

from maya.estimators.registry import write_atomic
from maya.core.warehouse import wait_for_lock

TARGET = 0.05
SCATTER_POINTS = 1500
"""Held-out kernels drawn per hardware (a deterministic sample)."""
PLOTS = ("predicted-vs-measured", "error-by-family", "error-over-versions", "latest-predictions")
"""The plots' div ids."""


class NoAccuracyData(Exception):
    """The warehouse holds no evaluated estimator version."""


@dataclass(frozen=True)
class AccuracyData:
    version: str
    kernels: pd.DataFrame
    workloads: pd.DataFrame
    families: pd.DataFrame
    versions: pd.DataFrame
    version_families: pd.DataFrame
    kernel_summary: pd.DataFrame


def dashboard_path(warehouse: Path) -> Path:
    return warehouse.parent / "dashboard" / "accuracy.html"


def build(warehouse: Path) -> tuple[Path, bool]:
    """Write the dashboard of the warehouse's evaluations; returns its path and whether it changed
    (the page is deterministic: unchanged evaluations leave the file untouched)."""
    page = render(read(warehouse)).encode()
    path = dashboard_path(warehouse)
    if path.is_file() and path.read_bytes() == page:
        return path, False
    return write_atomic(path, page), True


def read(warehouse: Path) -> AccuracyData:
    missing = NoAccuracyData(f"no estimator version has been evaluated in {warehouse} yet: run the pipeline's "
                             "estimator_validation (dagster dev -m maya.pipelines.definitions)")
    if not warehouse.is_file():
        raise missing
    con = wait_for_lock(lambda: duckdb.connect(str(warehouse), read_only=True))
    try:
        versions = con.execute(
            "SELECT e.version, e.kernel_mape, e.workload_mape, e.workloads FROM estimator_evaluations e "
            "JOIN estimator_versions v USING (version) ORDER BY v.created_at, v.version").df()
        if versions.empty:
            raise missing
        alias = con.execute("SELECT version FROM estimator_aliases WHERE alias = 'latest'").fetchone()
        version = alias[0] if alias and alias[0] in set(versions["version"]) else versions["version"].iloc[-1]
        ape = "abs(predicted_ns - measured_ns) / measured_ns"
        return AccuracyData(
            version=version,
            kernels=con.execute(
                "SELECT hardware, family, op, measured_ns, predicted_ns FROM (SELECT *, row_number() OVER "
                "(PARTITION BY hardware ORDER BY hash(op, measured_ns, predicted_ns)) AS n FROM kernel_predictions "
                "WHERE version = ?) WHERE n <= ? ORDER BY hardware, n", [version, SCATTER_POINTS]).df(),
            workloads=con.execute("SELECT hardware, workload, measured_ns, predicted_ns, error AS failure "
                                  "FROM workload_predictions WHERE version = ? ORDER BY hardware, workload",
                                  [version]).df(),
            families=con.execute(
                f"SELECT family, quantile_cont({ape}, [0.05, 0.25, 0.5, 0.75, 0.95]) AS q, avg({ape}) AS mean, "
                "count(*) AS rows FROM kernel_predictions WHERE version = ? GROUP BY family ORDER BY family",
                [version]).df(),
            versions=versions,
            version_families=con.execute("SELECT version, family, sum(rows * mape) / sum(rows) AS mape "
                                         "FROM kernel_errors GROUP BY ALL ORDER BY family").df(),
            kernel_summary=con.execute(
                f"SELECT hardware, family, count(*) AS rows, median(measured_ns) AS measured_ns, "
                f"median(predicted_ns) AS predicted_ns, avg({ape}) AS error FROM kernel_predictions "
                "WHERE version = ? GROUP BY ALL ORDER BY hardware, family", [version]).df())
    except duckdb.CatalogException:  # the evaluation tables do not exist yet
        raise missing from None
    finally:
        con.close()


def render(data: AccuracyData) -> str:
    figures = dict(zip(PLOTS, (_scatter(data), _family_errors(data), _over_versions(data), _table(data))))
    plots = "\n".join(_section(name, fig) for name, fig in figures.items())
    measured = data.workloads["failure"].isna().sum()
    ground_truth = (f"{measured} ground-truth workload(s) predicted" if len(data.workloads) else
                    "no ground truth available: end-to-end error not measured")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Maya estimator accuracy</title>
<script type="text/javascript">{get_plotlyjs()}</script>
<style>body {{ font-family: sans-serif; margin: 2em; }} section {{ margin-bottom: 2em; }}</style></head>
<body><h1>Maya estimator accuracy</h1>
<p>Latest estimator version <b>{html.escape(data.version)}</b>; {len(data.versions)} version(s) evaluated;
{html.escape(ground_truth)}. Kernel errors are on NeuSight's held-out test split.</p>
{plots}
</body></html>
"""


def _section(div_id: str, fig: go.Figure) -> str:
    plot = pio.to_html(fig, full_html=False, include_plotlyjs=False, div_id=div_id, config={"displaylogo": False})
    return f"<section>{plot}</section>"


def _scatter(data: AccuracyData) -> go.Figure:
    fig = go.Figure()
    for hardware, rows in data.kernels.groupby("hardware", sort=True):
        fig.add_trace(go.Scatter(x=rows["measured_ns"] / 1e3, y=rows["predicted_ns"] / 1e3, mode="markers",
                                 name=f"{hardware} kernels", text=rows["family"] + " " + rows["op"],
                                 marker={"size": 4, "opacity": 0.6}))
    for hardware, rows in data.workloads.dropna(subset=["predicted_ns"]).groupby("hardware", sort=True):
        fig.add_trace(go.Scatter(x=rows["measured_ns"] / 1e3, y=rows["predicted_ns"] / 1e3, mode="markers",
                                 name=f"{hardware} workloads", text=rows["workload"],
                                 marker={"size": 10, "symbol": "diamond"}))
    values = pd.concat([data.kernels[["measured_ns", "predicted_ns"]], data.workloads[["measured_ns", "predicted_ns"]]])
    if len(values):
        low, high = values.min().min() / 1e3, values.max().max() / 1e3
        fig.add_trace(go.Scatter(x=[low, high], y=[low, high], mode="lines", name="predicted = measured",
                                 line={"dash": "dot", "color": "grey"}))
    fig.update_layout(title=f"Predicted vs measured, per hardware ({data.version})", height=550)
    fig.update_xaxes(type="log", title="measured (µs)")
    fig.update_yaxes(type="log", title="predicted (µs)")
    return fig


def _family_errors(data: AccuracyData) -> go.Figure:
    fig = go.Figure()
    for row in data.families.itertuples():
        p5, q1, median, q3, p95 = row.q
        fig.add_trace(go.Box(x=[row.family], q1=[q1], median=[median], q3=[q3], lowerfence=[p5], upperfence=[p95],
                             mean=[row.mean], name=f"{row.family} ({row.rows:,} kernels)"))
    fig.update_layout(title=f"Absolute error per kernel family ({data.version}; whiskers: 5th-95th percentile)",
                      height=450, showlegend=False)
    fig.update_yaxes(type="log", dtick=1, title="|predicted - measured| / measured", tickformat=".1%")
    return fig


def _over_versions(data: AccuracyData) -> go.Figure:
    order = list(data.versions["version"])
    fig = go.Figure(go.Scatter(x=order, y=data.versions["kernel_mape"], mode="lines+markers",
                               name="kernels, all families"))
    for family, rows in data.version_families.groupby("family", sort=True):
        rows = rows.set_index("version").reindex(order)
        fig.add_trace(go.Scatter(x=order, y=rows["mape"], mode="lines+markers", name=f"kernels, {family}",
                                 line={"dash": "dot"}))
    if data.versions["workloads"].gt(0).any():
        fig.add_trace(go.Scatter(x=order, y=data.versions["workload_mape"], mode="lines+markers",
                                 name="end to end (ground truth)", line={"width": 3}))
    fig.add_hline(y=TARGET, line_dash="dash", line_color="red", annotation_text="5% end-to-end target")
    fig.update_layout(title="Mean absolute error over estimator versions", height=450)
    fig.update_xaxes(type="category", title="estimator version")
    fig.update_yaxes(title="mean absolute error", tickformat=".0%", rangemode="tozero")
    return fig


def _table(data: AccuracyData) -> go.Figure:
    w = data.workloads
    workloads = w.assign(kind="workload", name=w["workload"], rows=1,
                         error=(w["predicted_ns"] - w["measured_ns"]).abs() / w["measured_ns"])
    kernels = data.kernel_summary.assign(kind="kernels", name=data.kernel_summary["family"])
    rows = pd.concat([workloads, kernels], ignore_index=True)
    cells = [rows["kind"], rows["name"], rows["hardware"], rows["rows"].map("{:,}".format),
             *(_formatted(rows[c] / 1e3, "{:,.1f}") for c in ("measured_ns", "predicted_ns")),
             _formatted(rows["error"], "{:.1%}")]
    header = ["kind", "name", "hardware", "rows", "measured (µs, median)", "predicted (µs, median)",
              "mean absolute error"]
    fig = go.Figure(go.Table(header={"values": header}, cells={"values": cells}))
    fig.update_layout(title=f"Latest predictions ({data.version})", height=max(300, 28 * len(rows) + 120))
    return fig


def _formatted(values: pd.Series, pattern: str) -> pd.Series:
    return values.map(lambda v: "not predicted" if pd.isna(v) else pattern.format(v))
