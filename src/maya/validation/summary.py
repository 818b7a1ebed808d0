"""The figures of a suite's results: mean and max |error|, by GPU, model size, GPU count and sequence length, band
coverage, failures and false out-of-memory predictions; and the `--json` document."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from .store import RowResult

MAE_TARGET, MAX_TARGET = 5.0, 10.0
"""Targets of issue 19: mean |error| <= 5%, max <= 10%."""
COVERAGE_TARGET = (70.0, 90.0)
"""The share of rows whose measured time falls in the 10-90% band, when the band is calibrated (~80%)."""
GROUPS = (("GPU", "gpu"), ("size", "size"), ("GPUs", "gpus"), ("sequence", "seq"))
"""The summary's breakdowns: (name, result column); rows with no value in the column (stored before it) are left
out of its group."""
SIZE_ORDER = ("125m", "350m", "760m", "1b", "3b", "7b", "13b", "30b", "70b")


@dataclass(frozen=True)
class Summary:
    rows: int
    predicted: int
    failed: int
    out_of_memory: int
    """Rows predicted (or emulated) to run out of memory: each published row completed, so all are false."""
    mean_abs_error_pct: float | None
    max_abs_error_pct: float | None
    worst_row: int | None
    coverage_pct: float | None
    """Share of predicted rows with a band whose measured time lies inside it."""
    banded: int
    by: dict[str, pd.DataFrame]
    """Per GPU, size, GPU count and sequence length: rows, mean and max |error|, signed mean, coverage."""


def frame(results: list[RowResult]) -> pd.DataFrame:
    return pd.DataFrame([r.flat() for r in results])


def summarize(results: list[RowResult]) -> Summary:
    table = frame(results)
    if table.empty:
        return Summary(0, 0, 0, 0, None, None, None, None, 0, {})
    ok = table[table["status"] == "ok"]
    ok = ok.assign(seq=pd.to_numeric(ok["seq"]).astype("Int64"))  # None in rows stored before the column
    errors = ok["error_pct"].abs()
    banded = ok[ok["in_band"].notna()]
    oom = int((table["status"] == "oom").sum() + ok["oom"].fillna(False).astype(bool).sum())
    by = {name: _group(ok, column) for name, column in GROUPS}
    return Summary(
        rows=len(table),
        predicted=len(ok),
        failed=int((table["status"] == "failed").sum()),
        out_of_memory=oom,
        mean_abs_error_pct=float(errors.mean()) if len(ok) else None,
        max_abs_error_pct=float(errors.max()) if len(ok) else None,
        worst_row=int(ok.loc[errors.idxmax(), "row"]) if len(ok) else None,
        coverage_pct=float(100 * banded["in_band"].astype(bool).mean()) if len(banded) else None,
        banded=len(banded),
        by=by,
    )


def _group(ok: pd.DataFrame, column: str) -> pd.DataFrame:
    if ok.empty:
        return pd.DataFrame(
            columns=["rows", "mean_abs_error_pct", "max_abs_error_pct", "mean_error_pct", "coverage_pct"]
        )
    grouped = ok.assign(
        abs_error=ok["error_pct"].abs(),
        covered=ok["in_band"].map(lambda v: np.nan if v is None or v != v else float(bool(v))),
    )
    out = grouped.groupby(column).agg(
        rows=("row", "size"),
        mean_abs_error_pct=("abs_error", "mean"),
        max_abs_error_pct=("abs_error", "max"),
        mean_error_pct=("error_pct", "mean"),
        coverage_pct=("covered", "mean"),
    )
    out["coverage_pct"] *= 100
    if column == "size":
        out = out.reindex([s for s in SIZE_ORDER if s in out.index] + sorted(set(out.index) - set(SIZE_ORDER)))
    return out.sort_index() if column != "size" else out


def to_json(results: list[RowResult], summary: Summary, *, suite: str, version: str) -> dict:
    """The `maya validate --json` document."""
    rows = [
        {
            "row": r.key.row,
            "label": r.key.label,
            "seq": r.seq,
            "status": r.status,
            "predicted_s": r.predicted_s,
            "measured_s": r.key.measured_s,
            "error_pct": r.error_pct,
            "band_low_s": r.band_low_s,
            "band_high_s": r.band_high_s,
            "in_band": r.in_band,
            "oom": r.oom,
            "reason": r.reason,
            "trace_digest": r.trace_digest,
            "emulate_s": r.emulate_s,
            "predict_s": r.predict_s,
        }
        for r in sorted(results, key=lambda r: r.key.row)
    ]
    by = {
        name: [
            {column: _plain(v) for column, v in {"key": key, **values}.items()}
            for key, values in table.to_dict("index").items()
        ]
        for name, table in summary.by.items()
    }
    return {
        "suite": suite,
        "estimator_version": version,
        "rows": rows,
        "mean_abs_error_pct": summary.mean_abs_error_pct,
        "max_abs_error_pct": summary.max_abs_error_pct,
        "predicted": summary.predicted,
        "failed": summary.failed,
        "out_of_memory": summary.out_of_memory,
        "band_coverage_pct": summary.coverage_pct,
        "by": by,
    }


def _plain(value):
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating, float)):
        return None if value != value else float(value)
    return value
