"""The sustained-clock mechanism on the published MPT rows, off and on: each selected row is evaluated as
`maya validate llm-foundry --rows ...` does (emulated once, its steady step predicted on its GPU and cluster,
stored; a re-run resumes), then its same trace predicted again with `PredictOptions(sustained_clock=False)`.
Prints per row both predictions and the sustained clock used, then per GPU and sequence band: rows, mean
|error|, mean signed error and 10-90% band coverage, off and on. Nothing is tuned on the rows.

    .venv/bin/python benchmarks/sustained_clock_mpt.py --rows 'gpu == "h100_80gb"'
    .venv/bin/python benchmarks/sustained_clock_mpt.py --rows 22,21,20,10,5,16,15,14,13,12,34,48
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from maya.api import PredictOptions, predict
from maya.validation import llm_foundry as kind
from maya.validation import load_suite, run_suite
from maya.validation.runner import _trace, traces_dir


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", required=True, help="`maya validate --rows`: numbers or a pandas query")
    parser.add_argument("--estimator-version", default="latest")
    parser.add_argument("--warehouse", type=Path, default=None)
    args = parser.parse_args()
    suite = load_suite("llm-foundry")
    rows = suite.select(args.rows)
    run = run_suite(suite, rows, version=args.estimator_version, warehouse=args.warehouse)
    table = []
    for r in run.results:
        if r.status != "ok":
            print(f"row {r.row}: {r.status}: {r.reason}")
            continue
        plan = kind.plan(r.row, rows.loc[r.row])
        run_dir, _, failure = _trace(plan, traces_dir())
        assert failure is None, failure
        off = predict(
            run_dir,
            PredictOptions(
                hardware=plan.hardware,
                cluster=plan.cluster,
                durations="estimators",
                estimator_version=run.version,
                warehouse=args.warehouse,
                band=True,
                sustained_clock=False,
            ),
        )
        note = next((n for n in r.details.get("notes", []) if n.startswith("sustained clock")), "")
        ratio = note.split(" run at ")[1].split(" x ")[0] if note else "1"
        for label, predicted, low, high in (
            ("off", off.iteration_ns / 1e9, off.band["low_ns"] / 1e9, off.band["high_ns"] / 1e9),
            ("on", r.predicted_s, r.band_low_s, r.band_high_s),
        ):
            table.append(
                {
                    "row": r.row,
                    "gpu": r.gpu,
                    "seq": r.seq,
                    "clock": label,
                    "ratio": float(ratio),
                    "measured_s": r.measured_s,
                    "predicted_s": predicted,
                    "error_pct": 100 * (predicted / r.measured_s - 1),
                    "in_band": low <= r.measured_s <= high,
                }
            )
    frame = pd.DataFrame(table)
    pd.set_option("display.width", 200)
    print(frame.pivot_table(index=["row", "gpu", "seq", "ratio"], columns="clock", values="error_pct").round(1))
    for by in ("gpu", "seq"):
        grouped = frame.assign(abs_error=frame["error_pct"].abs()).groupby([by, "clock"])
        print(
            grouped.agg(
                rows=("row", "size"),
                mean_abs_error_pct=("abs_error", "mean"),
                mean_signed_error_pct=("error_pct", "mean"),
                coverage=("in_band", "mean"),
            ).round(3)
        )


if __name__ == "__main__":
    main()
