"""The accuracy dashboard: one static HTML file (plotly, inlined: it works offline) built from the
warehouse's evaluation tables and validation suites' rows, next to the warehouse at
`dashboard/accuracy.html`.

At the top, the headline figures of the latest estimator version (per suite: rows, mean and max |error|,
band coverage; kernels: held-out MAPE). Plots: predicted vs measured end to end per suite and estimator
version (with each row's 10-90% band), the suite's worst rows, kernels predicted vs measured per
hardware, error distribution per kernel family, error over estimator versions against the 5% target, and
a table of the latest version's predictions.
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

from maya.core.paths import write_atomic
from maya.core.warehouse import read_only

TARGET = 0.05
SCATTER_POINTS = 1500
"""Held-out kernels drawn per hardware (a deterministic sample)."""
PLOTS = (
    "suite-predicted-vs-measured",
    "suite-worst-rows",
    "predicted-vs-measured",
    "error-by-family",
    "error-over-versions",
    "latest-predictions",
)
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
    suites: pd.DataFrame
    """Validation suites' rows, the latest result per suite, row and estimator version
    (`maya.validation.latest`)."""


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
    missing = NoAccuracyData(
        f"no estimator version has been evaluated in {warehouse} yet: run `maya dashboard` "
        "(it evaluates the latest version) or the pipeline's estimator_validation (dagster dev "
        "-m maya.pipelines.definitions)"
    )
    with read_only(warehouse) as con:  # a missing file or table reads as no rows
        versions = con.execute(
            "SELECT e.version, e.kernel_mape, e.workload_mape, e.workloads FROM estimator_evaluations e "
            "JOIN estimator_versions v USING (version) ORDER BY v.created_at, v.version"
        ).df()
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
                "WHERE version = ?) WHERE n <= ? ORDER BY hardware, n",
                [version, SCATTER_POINTS],
            ).df(),
            workloads=con.execute(
                "SELECT hardware, workload, measured_ns, predicted_ns, error AS failure "
                "FROM workload_predictions WHERE version = ? ORDER BY hardware, workload",
                [version],
            ).df(),
            families=con.execute(
                f"SELECT family, quantile_cont({ape}, [0.05, 0.25, 0.5, 0.75, 0.95]) AS q, avg({ape}) AS mean, "
                "count(*) AS rows FROM kernel_predictions WHERE version = ? GROUP BY family ORDER BY family",
                [version],
            ).df(),
            versions=versions,
            version_families=con.execute(
                "SELECT version, family, sum(rows * mape) / sum(rows) AS mape "
                "FROM kernel_errors GROUP BY ALL ORDER BY family"
            ).df(),
            kernel_summary=con.execute(
                f"SELECT hardware, family, count(*) AS rows, median(measured_ns) AS measured_ns, "
                f"median(predicted_ns) AS predicted_ns, avg({ape}) AS error FROM kernel_predictions "
                "WHERE version = ? GROUP BY ALL ORDER BY hardware, family",
                [version],
            ).df(),
            suites=_suite_rows(con),
        )


def _suite_rows(con: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    columns = (
        'suite, "row", label, gpu, size, gpus, status, reason, measured_s, predicted_s, error_pct, band_low_s, '
        "band_high_s, in_band, oom, oom_reason, estimator_version"
    )
    return con.execute(
        f'SELECT {columns} FROM (SELECT *, row_number() OVER (PARTITION BY suite, "row", '
        "estimator_version ORDER BY recorded_at DESC) AS n FROM validation_rows) WHERE n = 1 "
        'ORDER BY suite, estimator_version, "row"'
    ).df()


def render(data: AccuracyData) -> str:
    figures = dict(
        zip(
            PLOTS,
            (
                _suite_scatter(data),
                _worst_rows(data),
                _scatter(data),
                _family_errors(data),
                _over_versions(data),
                _table(data),
            ),
        )
    )
    plots = "\n".join(_section(name, fig) for name, fig in figures.items())
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Maya accuracy</title>
<script type="text/javascript">{get_plotlyjs()}</script>
<style>body {{ font-family: sans-serif; margin: 2em; }} section {{ margin-bottom: 2em; }}
table.headline {{ border-collapse: collapse; margin: 1em 0; }}
table.headline td, table.headline th {{ border: 1px solid #ccc; padding: 0.4em 0.9em; text-align: right; }}
table.headline th {{ background: #f3f3f3; }} table.headline td:first-child {{ text-align: left; }}
.miss {{ color: #b00020; font-weight: bold; }} .met {{ color: #1b7a1b; font-weight: bold; }}</style></head>
<body><h1>How well Maya predicts</h1>
{_headline(data)}
{plots}
</body></html>
"""


def _headline(data: AccuracyData) -> str:
    """The latest version's figures at a glance: one line per suite, then the kernels."""
    rows = []
    latest = data.suites[data.suites["estimator_version"] == data.version]
    for suite, part in latest.groupby("suite", sort=True):
        ok = part[part["status"] == "ok"]
        errors = ok["error_pct"].astype("float64").abs()
        banded = ok["in_band"].dropna()
        mean, worst = (errors.mean(), errors.max()) if len(ok) else (float("nan"), float("nan"))
        verdict = "met" if len(ok) and mean <= 100 * TARGET and len(ok) == len(part) else "miss"
        rows.append(
            f"<tr><td>{html.escape(suite)} (end to end)</td><td>{len(ok)} of {len(part)}</td>"
            f'<td class="{verdict}">{_pct(mean)}</td><td>{_pct(worst)}</td>'
            f"<td>{_pct(100 * banded.astype(bool).mean()) if len(banded) else '-'}</td></tr>"
        )
    if not rows:
        rows.append(
            '<tr><td>end to end</td><td colspan="4">no validation suite has been run for this version: '
            "<code>maya validate llm-foundry</code></td></tr>"
        )
    kernel = data.versions.set_index("version").loc[data.version, "kernel_mape"]
    rows.append(
        f"<tr><td>kernels (NeuSight's held-out test split)</td><td>{int(data.families['rows'].sum()):,}</td>"
        f"<td>{_pct(100 * kernel) if kernel == kernel else '-'}</td><td>-</td><td>-</td></tr>"
    )
    workloads = data.workloads.dropna(subset=["predicted_ns"])
    if len(workloads):
        ape = 100 * ((workloads["predicted_ns"] - workloads["measured_ns"]).abs() / workloads["measured_ns"])
        rows.append(
            f"<tr><td>ground-truth workloads</td><td>{len(workloads)} of {len(data.workloads)}</td>"
            f"<td>{_pct(ape.mean())}</td><td>{_pct(ape.max())}</td><td>-</td></tr>"
        )
    return (
        f"<p>Estimator version <b>{html.escape(data.version)}</b> (latest of {len(data.versions)} evaluated). "
        f"Target: mean |error| &le; {100 * TARGET:.0f}% end to end; a calibrated 10-90% band covers about 80% "
        'of rows.</p>\n<table class="headline"><tr><th></th><th>rows predicted</th><th>mean |error|</th>'
        "<th>max |error|</th><th>band coverage</th></tr>" + "".join(rows) + "</table>"
    )


def _pct(value: float) -> str:
    return "-" if value != value else f"{value:.1f}%"


def _suite_scatter(data: AccuracyData) -> go.Figure:
    fig = go.Figure()
    done = data.suites[data.suites["status"] == "ok"]
    for (suite, version), rows in done.groupby(["suite", "estimator_version"], sort=True):
        predicted = rows["predicted_s"].astype("float64")
        low, high = rows["band_low_s"].astype("float64"), rows["band_high_s"].astype("float64")
        fig.add_trace(
            go.Scatter(
                x=rows["measured_s"],
                y=predicted,
                mode="markers",
                name=f"{suite} ({version})",
                text=(
                    "row "
                    + rows["row"].astype(str)
                    + ": "
                    + rows["label"]
                    + " "
                    + rows["error_pct"].map(lambda e: f"{e:+.1f}%")
                ),
                error_y={
                    "type": "data",
                    "symmetric": False,
                    "array": (high - predicted).fillna(0).clip(lower=0),
                    "arrayminus": (predicted - low).fillna(0).clip(lower=0),
                    "thickness": 1,
                },
                marker={"size": 8, "opacity": 0.8 if version == data.version else 0.35},
            )
        )
    if len(done):
        low = min(done["measured_s"].min(), done["predicted_s"].astype("float64").min()) / 1.2
        high = max(done["measured_s"].max(), done["predicted_s"].astype("float64").max()) * 1.2
        for ratio, dash, name in ((1.0, "dot", "predicted = measured"), (1.1, "dash", "±10%"), (0.9, "dash", None)):
            fig.add_trace(
                go.Scatter(
                    x=[low, high],
                    y=[low * ratio, high * ratio],
                    mode="lines",
                    name=name,
                    showlegend=name is not None,
                    line={"dash": dash, "color": "grey", "width": 1},
                )
            )
    else:
        fig.add_annotation(text="no validation suite results: run `maya validate llm-foundry`", showarrow=False)
    fig.update_layout(
        title="End to end: predicted vs measured time per suite row (error bars: the 10-90% band)", height=600
    )
    fig.update_xaxes(type="log", title="measured (s)")
    fig.update_yaxes(type="log", title="predicted (s)")
    return fig


def _worst_rows(data: AccuracyData) -> go.Figure:
    """The latest version's suite rows, worst |error| first, failures with their reason."""
    rows = data.suites[data.suites["estimator_version"] == data.version].copy()
    rows["order"] = rows["error_pct"].astype("float64").abs().fillna(float("inf"))
    rows = rows.sort_values("order", ascending=False).head(25)
    notes = [
        (r.reason if isinstance(r.reason, str) else "")
        if r.status != "ok"
        else (f"predicted OOM: {r.oom_reason}" if pd.notna(r.oom) and r.oom else "")
        for r in rows.itertuples()
    ]
    cells = [
        rows["suite"],
        rows["row"].astype(str),
        rows["label"],
        _formatted(rows["measured_s"], "{:,.3f}"),
        _formatted(rows["predicted_s"].astype("float64"), "{:,.3f}"),
        _formatted(rows["error_pct"].astype("float64"), "{:+.1f}%"),
        [("-" if pd.isna(lo) else f"{lo:,.3f} … {hi:,.3f}") for lo, hi in zip(rows["band_low_s"], rows["band_high_s"])],
        rows["status"],
        notes,
    ]
    header = ["suite", "row", "run", "measured (s)", "predicted (s)", "error", "10-90% band (s)", "status", "note"]
    fig = go.Figure(
        go.Table(
            header={"values": header}, cells={"values": cells}, columnwidth=[1.2, 0.5, 3.2, 1, 1, 0.8, 1.6, 0.7, 3]
        )
    )
    fig.update_layout(title=f"Suite rows, worst first ({data.version})", height=max(300, 30 * len(rows) + 140))
    return fig


def _section(div_id: str, fig: go.Figure) -> str:
    plot = pio.to_html(fig, full_html=False, include_plotlyjs=False, div_id=div_id, config={"displaylogo": False})
    return f"<section>{plot}</section>"


def _scatter(data: AccuracyData) -> go.Figure:
    fig = go.Figure()
    for hardware, rows in data.kernels.groupby("hardware", sort=True):
        fig.add_trace(
            go.Scatter(
                x=rows["measured_ns"] / 1e3,
                y=rows["predicted_ns"] / 1e3,
                mode="markers",
                name=f"{hardware} kernels",
                text=rows["family"] + " " + rows["op"],
                marker={"size": 4, "opacity": 0.6},
            )
        )
    for hardware, rows in data.workloads.dropna(subset=["predicted_ns"]).groupby("hardware", sort=True):
        fig.add_trace(
            go.Scatter(
                x=rows["measured_ns"] / 1e3,
                y=rows["predicted_ns"] / 1e3,
                mode="markers",
                name=f"{hardware} workloads",
                text=rows["workload"],
                marker={"size": 10, "symbol": "diamond"},
            )
        )
    values = pd.concat([data.kernels[["measured_ns", "predicted_ns"]], data.workloads[["measured_ns", "predicted_ns"]]])
    if len(values):
        low, high = values.min().min() / 1e3, values.max().max() / 1e3
        fig.add_trace(
            go.Scatter(
                x=[low, high],
                y=[low, high],
                mode="lines",
                name="predicted = measured",
                line={"dash": "dot", "color": "grey"},
            )
        )
    fig.update_layout(title=f"Kernels: predicted vs measured, per hardware ({data.version})", height=550)
    fig.update_xaxes(type="log", title="measured (µs)")
    fig.update_yaxes(type="log", title="predicted (µs)")
    return fig


def _family_errors(data: AccuracyData) -> go.Figure:
    fig = go.Figure()
    for row in data.families.itertuples():
        p5, q1, median, q3, p95 = row.q
        fig.add_trace(
            go.Box(
                x=[row.family],
                q1=[q1],
                median=[median],
                q3=[q3],
                lowerfence=[p5],
                upperfence=[p95],
                mean=[row.mean],
                name=f"{row.family} ({row.rows:,} kernels)",
            )
        )
    fig.update_layout(
        title=f"Absolute error per kernel family ({data.version}; whiskers: 5th-95th percentile)",
        height=450,
        showlegend=False,
    )
    fig.update_yaxes(type="log", dtick=1, title="|predicted - measured| / measured", tickformat=".1%")
    return fig


def _over_versions(data: AccuracyData) -> go.Figure:
    order = list(data.versions["version"])
    fig = go.Figure(
        go.Scatter(x=order, y=data.versions["kernel_mape"], mode="lines+markers", name="kernels, all families")
    )
    for family, rows in data.version_families.groupby("family", sort=True):
        rows = rows.set_index("version").reindex(order)
        fig.add_trace(
            go.Scatter(x=order, y=rows["mape"], mode="lines+markers", name=f"kernels, {family}", line={"dash": "dot"})
        )
    if data.versions["workloads"].gt(0).any():
        fig.add_trace(
            go.Scatter(
                x=order,
                y=data.versions["workload_mape"],
                mode="lines+markers",
                name="end to end (ground truth)",
                line={"width": 3},
            )
        )
    fig.add_hline(y=TARGET, line_dash="dash", line_color="red", annotation_text="5% end-to-end target")
    fig.update_layout(title="Mean absolute error over estimator versions", height=450)
    fig.update_xaxes(type="category", title="estimator version")
    fig.update_yaxes(title="mean absolute error", tickformat=".0%", rangemode="tozero")
    return fig


def _table(data: AccuracyData) -> go.Figure:
    w = data.workloads
    workloads = w.assign(
        kind="workload",
        name=w["workload"],
        rows=1,
        error=(w["predicted_ns"] - w["measured_ns"]).abs() / w["measured_ns"],
    )
    kernels = data.kernel_summary.assign(kind="kernels", name=data.kernel_summary["family"])
    rows = pd.concat([workloads, kernels], ignore_index=True)
    cells = [
        rows["kind"],
        rows["name"],
        rows["hardware"],
        rows["rows"].map("{:,}".format),
        *(_formatted(rows[c] / 1e3, "{:,.1f}") for c in ("measured_ns", "predicted_ns")),
        _formatted(rows["error"], "{:.1%}"),
    ]
    header = [
        "kind",
        "name",
        "hardware",
        "rows",
        "measured (µs, median)",
        "predicted (µs, median)",
        "mean absolute error",
    ]
    fig = go.Figure(go.Table(header={"values": header}, cells={"values": cells}))
    fig.update_layout(title=f"Latest predictions ({data.version})", height=max(300, 28 * len(rows) + 120))
    return fig


def _formatted(values: pd.Series, pattern: str) -> pd.Series:
    return values.map(lambda v: "not predicted" if pd.isna(v) else pattern.format(v))
