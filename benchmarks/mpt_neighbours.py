"""The published MPT rows against their own neighbours (for telling a mechanism Maya misses from a row the table
itself does not explain; not a prediction): step time per token processed on a GPU, by sequence length at a fixed
number of tokens a micro-batch, and by GPU count at a fixed model and sequence (with both ends' micro-batch and
gradient accumulation, which the tables often change with the GPU count), measured and, where a results CSV gives
a prediction, predicted.

    .venv/bin/python benchmarks/mpt_neighbours.py [--results RESULTS.csv] [--model 760m]

At a fixed number of tokens a micro-batch, every GEMM, norm and collective of a step is the same at any sequence
length and only attention changes: its work per token grows with the sequence (causal: about seq / 2 keys a
query), so a row whose time per token is above its next-longer neighbour's (`rises`) is slower than anything
sequence length can make it. `RESULTS.csv` has the columns `row`, `predicted` (seconds; e.g. the output of
`benchmarks/band_calibration.py` or `/tmp/repredict54.py`).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from maya.core.paths import data_dir

PUBLISHED = data_dir() / "published" / "llm_foundry_mpt.csv"


def published(path: Path = PUBLISHED) -> pd.DataFrame:
    """The published rows (index: row number) with tokens a micro-batch and measured microseconds per token."""
    table = pd.read_csv(path, dtype={"Activation Checkpointing": str})
    out = pd.DataFrame(
        {
            "table": table["table"],
            "model": table["Model"],
            "gpu": table["GPU"],
            "gpus": table["# GPUs"],
            "seq": table["SeqLen (T)"],
            "micro_batch": table["MicroBatchSize"],
            "grad_accum": table["GradAccum"],
            "checkpointing": table["Activation Checkpointing"],
            "measured_s": table["step_time_s_derived"],
        }
    )
    out["micro_tokens"] = out["seq"] * out["micro_batch"]
    out["measured_us_per_token"] = out["measured_s"] / (out["micro_tokens"] * out["grad_accum"]) * 1e6
    out.index.name = "row"
    return out


def with_predictions(rows: pd.DataFrame, results: pd.DataFrame) -> pd.DataFrame:
    """`rows` with `predicted_us_per_token` and `error_pct` where `results` (columns row, predicted) has the row."""
    if not {"row", "predicted"} <= set(results.columns):
        raise ValueError(f"the results need the columns 'row' and 'predicted'; got {list(results.columns)}")
    predicted = results.set_index("row")["predicted"].reindex(rows.index)
    out = rows.copy()
    out["predicted_us_per_token"] = predicted / (out["micro_tokens"] * out["grad_accum"]) * 1e6
    out["error_pct"] = (predicted / out["measured_s"] - 1) * 100
    return out


def by_sequence(rows: pd.DataFrame) -> pd.DataFrame:
    """Families of rows that differ only in sequence length (same table, model, GPUs, checkpointing and tokens a
    micro-batch; two rows or more), longest sequence first, each row with the change of its time per token from
    its next-longer neighbour (`change_pct`) and `rises` where that change is positive."""
    keys = ["table", "model", "gpus", "checkpointing", "micro_tokens"]
    family = rows.reset_index().sort_values(keys + ["seq"], ascending=[True] * len(keys) + [False])
    family = family[family.groupby(keys)["seq"].transform("size") >= 2].copy()
    previous = family.groupby(keys)["measured_us_per_token"].shift()
    family["change_pct"] = (family["measured_us_per_token"] / previous - 1) * 100
    family["rises"] = family["change_pct"] > 0
    return family.set_index("row")


def by_gpu_count(rows: pd.DataFrame) -> pd.DataFrame:
    """Per (table, model, sequence, checkpointing) seen at two GPU counts or more: the growth in percent of the
    time per token from the fewest GPUs to the most, measured and, when `rows` carry predictions, predicted
    (then over the predicted rows only), with both ends' micro-batch and gradient accumulation (`mb`, `ga`):
    the tables often change them with the GPU count, so a growth may hold their change as well as the count's."""
    keys = ["table", "model", "seq", "checkpointing"]
    if "predicted_us_per_token" in rows:
        rows = rows.dropna(subset=["predicted_us_per_token"])
    found = []
    for key, group in rows.reset_index().groupby(keys):
        if group["gpus"].nunique() < 2:
            continue
        group = group.sort_values(["gpus", "row"])
        first, last = group.iloc[0], group.iloc[-1]
        record = dict(zip(keys, key), rows=f"{first.row}->{last.row}", gpus=f"{first.gpus}->{last.gpus}")
        record["mb"] = f"{first.micro_batch}->{last.micro_batch}"
        record["ga"] = f"{first.grad_accum}->{last.grad_accum}"
        record["measured_growth_pct"] = (last.measured_us_per_token / first.measured_us_per_token - 1) * 100
        if "predicted_us_per_token" in group:
            record["predicted_growth_pct"] = (last.predicted_us_per_token / first.predicted_us_per_token - 1) * 100
        found.append(record)
    return pd.DataFrame(found)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", type=Path, help="CSV with the columns row, predicted (seconds)")
    ap.add_argument("--model", help="only this model size (e.g. 760m)")
    args = ap.parse_args()
    rows = published()
    if args.results:
        rows = with_predictions(rows, pd.read_csv(args.results))
    if args.model:
        rows = rows[rows["model"] == args.model]
    pd.set_option("display.width", 250)
    pd.set_option("display.max_rows", 500)
    columns = ["table", "model", "gpus", "seq", "micro_batch", "micro_tokens", "measured_us_per_token", "change_pct"]
    columns += ["predicted_us_per_token", "error_pct"] if args.results else []
    print("By sequence length at a fixed number of tokens a micro-batch:")
    print(by_sequence(rows)[columns + ["rises"]].round(2).to_string())
    print("\nBy GPU count at a fixed model and sequence (mb, ga: micro-batch and gradient accumulation at each end):")
    print(by_gpu_count(rows).round(2).to_string(index=False))


if __name__ == "__main__":
    main()
