"""`maya validate SUITE`: predict a suite of measured training runs and show how well Maya did."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer
from rich.table import Table

from .common import ESTIMATOR_VERSION, JOBS, JSON, WAREHOUSE, fail, out, row_progress

SUITE_HELP = (
    "llm-foundry (MosaicML's 162 published MPT rows), llm-foundry-smoke (3 of them), neusight "
    "(NeuSight's single-GPU training rows), korthikanti2022 (Megatron-LM GPT 22B-1T, run as its "
    "pretrain_gpt.py), modded-nanogpt (six speed-run records on 8 H100s), a .csv (llm-foundry or Megatron "
    "layout) / .parquet (NeuSight layout) file, or a folder of scripts with their published.json."
)
ROWS_HELP = (
    "Rows to run: numbers (3,7,20-22) or a pandas query over the suite's columns and the aliases row, "
    "model, seq, gpus, gpu, mbs, ga, precision, sharding, ckpt, e.g. 'gpu == \"h100_80gb\" and gpus <= 64'."
)


def validate_cmd(
    suite: Annotated[str, typer.Argument(metavar="SUITE", help=SUITE_HELP)],
    rows: Annotated[str | None, typer.Option("--rows", help=ROWS_HELP)] = None,
    jobs: JOBS = 1,
    estimator_version: ESTIMATOR_VERSION = "latest",
    warehouse: WAREHOUSE = None,
    as_json: JSON = False,
):
    """Measure Maya's accuracy against published measurements.

    Emulates every row of SUITE, predicts its measured time (the steady optimizer step on the row's GPUs
    and cluster, with a 10-90% band from the estimators' held-out residuals), compares, and stores each
    row in the warehouse (validation_rows) as it is done. A re-run resumes; a row that fails says why and
    the suite goes on. (The schema check of a run is `maya trace check`.)
    """
    from maya.estimators import RegistryError
    from maya.validation import SuiteError, load_suite, run_suite, summarize, to_json

    try:
        loaded = load_suite(suite)
        selected = loaded.select(rows)
    except SuiteError as e:
        fail(str(e), 2)
    progress = row_progress(transient=as_json)
    state: dict = {}

    def on_start(total: int, done: int) -> None:
        state["task"] = progress.add_task(f"{loaded.name}", total=total, last=f"{done} resumed" if done else "")

    def on_row(result) -> None:
        figure = f"{result.error_pct:+.1f}%" if result.error_pct is not None else result.status
        progress.update(state["task"], advance=1, last=f"row {result.key.row}: {figure}")
        if result.status != "ok" and not result.resumed:
            progress.console.print(
                f"row {result.key.row} ({result.key.label}) {result.status}: {result.reason}",
                style="yellow",
                highlight=False,
                markup=False,
            )

    try:
        with progress:
            run = run_suite(
                loaded,
                selected,
                version=estimator_version,
                jobs=jobs,
                warehouse=warehouse,
                on_start=on_start,
                on_row=on_row,
            )
    except RegistryError as e:
        fail(f"{e}; train one with `maya estimators train`")
    summary = summarize(run.results)
    if as_json:
        sys.stdout.write(json.dumps(to_json(run.results, summary, suite=loaded.name, version=run.version)) + "\n")
        return
    _print(run, summary)


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:,.3f}"


def _pct(value: float | None, signed: bool = False) -> str:
    return "-" if value is None or value != value else (f"{value:+.1f}%" if signed else f"{value:.1f}%")


def _print(run, summary) -> None:
    from maya.validation.summary import COVERAGE_TARGET, MAE_TARGET, MAX_TARGET

    t = Table(
        "row",
        "run",
        "measured s",
        "predicted s",
        "error",
        "10-90% band s",
        "status",
        title=f"{run.suite.name}: {len(run.results)} rows, estimator version {run.version}",
        title_justify="left",
    )
    for r in run.results:
        band = f"{_s(r.band_low_s)} … {_s(r.band_high_s)}" if r.band_low_s is not None else "-"
        status = r.status if r.status != "ok" else ("predicted OOM" if r.oom else "ok")
        if r.status == "ok" and r.in_band is False:
            band += " (out)"
        t.add_row(
            str(r.key.row),
            r.key.label,
            _s(r.key.measured_s),
            _s(r.predicted_s),
            _pct(r.error_pct, True),
            band,
            status + (f": {r.reason[:80]}" if r.reason and r.status != "ok" else ""),
        )
    out.print(t)
    for name, table in summary.by.items():
        if table.empty:
            continue
        by = Table(
            name,
            "rows",
            "mean |error|",
            "max |error|",
            "mean error",
            "band coverage",
            title=f"by {name}",
            title_justify="left",
        )
        for key, v in table.iterrows():
            by.add_row(
                str(key),
                str(int(v["rows"])),
                _pct(v["mean_abs_error_pct"]),
                _pct(v["max_abs_error_pct"]),
                _pct(v["mean_error_pct"], True),
                _pct(v["coverage_pct"]),
            )
        out.print(by)
    for assumption in run.assumptions:
        out.print(f"assumed: {assumption}", style="dim", highlight=False)
    if summary.predicted:
        met = summary.mean_abs_error_pct <= MAE_TARGET and summary.max_abs_error_pct <= MAX_TARGET
        out.print(
            f"{summary.predicted} of {summary.rows} rows predicted: mean |error| "
            f"[bold]{summary.mean_abs_error_pct:.1f}%[/], max [bold]{summary.max_abs_error_pct:.1f}%[/] (row "
            f"{summary.worst_row}); target {MAE_TARGET:.0f}% / {MAX_TARGET:.0f}%: "
            + ("[green]met[/]" if met else "[red]not met[/]"),
            highlight=False,
        )
    if summary.coverage_pct is not None:
        low, high = COVERAGE_TARGET
        out.print(
            f"10-90% band covers the measured time on {summary.coverage_pct:.0f}% of {summary.banded} rows "
            f"(calibrated: {low:.0f}-{high:.0f}%)",
            highlight=False,
        )
    if summary.failed or summary.out_of_memory:
        out.print(
            f"{summary.failed} row(s) failed; {summary.out_of_memory} predicted or emulated out of memory "
            "(every published row completed)",
            style="yellow",
            highlight=False,
        )
    resumed = sum(r.resumed for r in run.results)
    out.print(
        f"{run.seconds:.0f} s" + (f"; {resumed} row(s) resumed from the warehouse" if resumed else ""), style="dim"
    )
