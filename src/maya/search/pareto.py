"""Presenting a search: the Pareto front of time against cost and a self-contained HTML plot of it."""

from __future__ import annotations

from pathlib import Path

from .runner import Record, SearchResult


def pareto_front(records: list[Record]) -> list[Record]:
    """Feasible points no other point beats on both iteration time and cost, fastest first."""
    feasible = sorted((r for r in records if r.cost is not None), key=lambda r: (r.outcome.iteration_ns, r.cost))
    front: list[Record] = []
    for r in feasible:
        if not front or r.cost < front[-1].cost:
            front.append(r)
    return front


def describe(record: Record) -> str:
    return " ".join(f"{k}={v}" for k, v in record.params.items())


def write_pareto_html(result: SearchResult, path: str | Path, *, cost_unit: str) -> Path:
    """Every feasible point (time vs cost), the Pareto front highlighted, as one HTML file with plotly.js."""
    import plotly.graph_objects as go

    feasible = [r for r in result.records if r.cost is not None]
    front = pareto_front(result.records)
    fig = go.Figure()
    fig.add_trace(
        go.Scatter(
            x=[r.outcome.iteration_ns / 1e6 for r in feasible],
            y=[r.cost for r in feasible],
            mode="markers",
            name="configurations",
            text=[describe(r) for r in feasible],
            marker={"color": "lightgray", "size": 8},
        )
    )
    fig.add_trace(
        go.Scatter(
            x=[r.outcome.iteration_ns / 1e6 for r in front],
            y=[r.cost for r in front],
            mode="lines+markers",
            name="Pareto front",
            text=[describe(r) for r in front],
            marker={"color": "crimson", "size": 10},
        )
    )
    fig.update_layout(
        title=f"search {result.search_id}: time vs cost",
        xaxis_title="iteration time (ms)",
        yaxis_title=f"cost per iteration ({cost_unit})",
        template="plotly_white",
    )
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.write_html(path, include_plotlyjs=True, full_html=True)
    return path
