"""Prototype of the per-row loop of issue 19: for rows of the published llm-foundry MPT table, emulate
`data/workloads/mpt.py` with the row's setup (deduplicated: the emulator captures a representative
rank and one more to check it), predict the steady optimizer step on the row's GPU and cluster, and
compare with the measured step (`step_time_s_derived`). Prints one line per row and, with `--json`,
the rows as JSON. Nothing is tuned on the rows.

    .venv/bin/python benchmarks/mpt_rows_probe.py --rows 20,33 [--keep runs/ [--reuse]] [--json]
    .venv/bin/python benchmarks/mpt_rows_probe.py --list            # the rows with their index

Clusters: A100 rows on `data/clusters/a100-roce-1600g.json` (8 A100 SXM a node on NVLink, 1600 Gb/s
RoCE between nodes, as the tables say), H100 rows on `dgx-h100` (the tables name no network; the data
README says to assume DGX H100 nodes). Steps: 3 (2 steady) for up to 4 micro-batches a step, else 2.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src" / "maya" / "data" / "workloads"))
from mpt_rows import HARDWARE, workload_args  # noqa: E402  (the table-row -> mpt.py arguments mapping)

WORKLOAD = REPO / "src" / "maya" / "data" / "workloads" / "mpt.py"
TABLE = REPO / "src" / "maya" / "data" / "published" / "llm_foundry_mpt.csv"
GPUS_PER_NODE = 8
CLUSTER = {"a100_40gb": "a100-roce-1600g", "a100_80gb": "a100-roce-1600g", "h100_80gb": "dgx-h100"}


def maya(*args: str) -> list[str]:
    return ["nice", "-n", "10", str(REPO / ".venv" / "bin" / "maya"), *args]


def probe(index: int, row: dict, work: Path, sdpa_a100: str, reuse: bool = False, sdpa_h100: str = "auto") -> dict:
    gpus, gpu = int(row["# GPUs"]), row["GPU"]
    steps = 3 if int(row["GradAccum"]) <= 4 else 2
    backend = sdpa_a100 if gpu.startswith("a100") else sdpa_h100
    out = work / f"row{index}-{backend}"
    reused = reuse and (out / "run.parquet").is_file()
    if not reused:
        shutil.rmtree(out, ignore_errors=True)
    result = {
        "row": index,
        "model": row["Model"],
        "seq": int(row["SeqLen (T)"]),
        "gpus": gpus,
        "gpu": gpu,
        "mbs": int(row["MicroBatchSize"]),
        "ga": int(row["GradAccum"]),
        "precision": row["Precision"],
        "sharding": row["Sharding Strategy"],
        "ckpt": row["Activation Checkpointing"] == "True",
        "sdpa_backend": backend,
        "measured_s": float(row["step_time_s_derived"]),
    }
    command = maya(
        "emulate",
        "--world-size",
        str(gpus),
        "--nnodes",
        str(math.ceil(gpus / GPUS_PER_NODE)),
        "--hardware",
        HARDWARE[gpu],
        "--out",
        str(out),
        "--",
        "python",
        str(WORKLOAD),
        *workload_args(row, steps=steps, sdpa_backend=backend),
    )
    start = time.monotonic()
    emulated = (
        subprocess.CompletedProcess(command, 0, "", "")
        if reused
        else subprocess.run(command, capture_output=True, text=True)
    )
    result["emulate_s"] = 0.0 if reused else round(time.monotonic() - start, 1)
    if emulated.returncode != 0:
        result["error"] = f"emulate exit {emulated.returncode}: {emulated.stdout[-600:]}{emulated.stderr[-600:]}"
        return result
    start = time.monotonic()
    predicted = subprocess.run(
        maya("predict", str(out), "--hardware", HARDWARE[gpu], "--cluster", CLUSTER[gpu], "--json"),
        capture_output=True,
        text=True,
    )
    result["predict_s"] = round(time.monotonic() - start, 1)
    if predicted.returncode != 0:
        result["error"] = f"predict exit {predicted.returncode}: {predicted.stderr[-800:]}"
        return result
    p = json.loads(predicted.stdout)
    result.update(
        {
            "predicted_s": p["iteration_ns"] / 1e9,
            "error_pct": 100 * (p["iteration_ns"] / 1e9 / result["measured_s"] - 1),
            "breakdown_s": {k: v / 1e3 for k, v in p["breakdown_ms"].items()},
            "mfu_predicted": p["mfu"],
            "mfu_published": float(row["MFU"]) / 100,
            "peak_gib": p["peak_memory_bytes"] / 2**30,
            "capacity_gib": p["memory_capacity_bytes"] / 2**30,
            "oom": p["oom"],
            "steady_iterations": p["steady_iterations"],
            "captured_ranks": p["captured_ranks"],
            "notes": p["notes"],
            "assumptions": p["assumptions"],
        }
    )
    return result


def line(r: dict) -> str:
    head = (
        f"row {r['row']:>3} {r['model']:>4} s{r['seq']:<5} {r['gpus']:>3}x{r['gpu']:<9} mbs {r['mbs']:>3} "
        f"ga {r['ga']:>2} {r['precision']:<8} {r['sharding']:<13} ckpt {'y' if r['ckpt'] else 'n'}"
    )
    if "error" in r:
        return f"{head}  FAILED ({r['emulate_s']} s): {r['error'].strip().splitlines()[-1][:160]}"
    b = r["breakdown_s"]
    return (
        f"{head}  measured {r['measured_s']:8.3f} s  predicted {r['predicted_s']:8.3f} s  {r['error_pct']:+6.1f}%  "
        f"[compute {b['compute']:.3f}, exposed comm {b['exposed_comm']:.3f}, host {b['host_bound']:.3f}, "
        f"idle {b['idle']:.3f}]  MFU {100 * r['mfu_predicted']:.1f}% vs {100 * r['mfu_published']:.1f}%  "
        f"mem {r['peak_gib']:.1f}/{r['capacity_gib']:.1f} GiB{' OOM' if r['oom'] else ''}  "
        f"(emulate {r['emulate_s']} s, predict {r['predict_s']} s)"
    )


def parse_rows(text: str, count: int) -> list[int]:
    rows: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        rows += list(range(int(lo), int(hi or lo) + 1))
    bad = [r for r in rows if not 0 <= r < count]
    if bad:
        raise SystemExit(f"error: rows {bad} are outside the table's {count} rows (0-{count - 1})")
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", help="row indices of the table (0-based, data rows): 3,7,20-22")
    ap.add_argument("--table", type=Path, default=TABLE)
    ap.add_argument("--keep", type=Path, help="keep the emulated runs in this directory (default: a temporary one)")
    ap.add_argument(
        "--sdpa-a100",
        default="flash",
        choices=("auto", "cudnn", "flash"),
        help="SDPA backend on A100 rows (default flash: torch's FlashAttention-2 kernels, the kind the "
        "published runs had; see data/workloads/README.md)",
    )
    ap.add_argument(
        "--sdpa-h100",
        default="flash",
        choices=("auto", "cudnn", "flash"),
        help="SDPA backend on H100 rows (default flash, as on A100; auto: torch picks cuDNN attention "
        "on sm_90, whose Hopper kernels overlap softmax and products)",
    )
    ap.add_argument(
        "--reuse", action="store_true", help="with --keep: predict on a row's kept run instead of emulating it again"
    )
    ap.add_argument("--list", action="store_true", help="list the rows and exit")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    with args.table.open() as f:
        table = list(csv.DictReader(f))
    if args.list:
        for i, r in enumerate(table):
            print(
                i,
                r["Model"],
                r["SeqLen (T)"],
                r["# GPUs"],
                r["GPU"],
                r["MicroBatchSize"],
                r["GradAccum"],
                r["Precision"],
                r["Sharding Strategy"],
                r["Activation Checkpointing"],
                r["step_time_s_derived"],
            )
        return
    if not args.rows:
        ap.error("give --rows (see --list)")
    os.environ.setdefault("MAYA_HOME", str(REPO / ".maya"))
    work = args.keep or Path(tempfile.mkdtemp(prefix="mpt_probe_"))
    work.mkdir(parents=True, exist_ok=True)
    results = []
    for index in parse_rows(args.rows, len(table)):
        r = probe(index, table[index], work, args.sdpa_a100, args.reuse, args.sdpa_h100)
        results.append(r)
        print(line(r), flush=True)
    done = [r for r in results if "error" not in r]
    if done:
        errors = [abs(r["error_pct"]) for r in done]
        print(
            f"{len(done)} of {len(results)} rows: mean |error| {sum(errors) / len(errors):.1f}%, max {max(errors):.1f}%"
        )
    if args.json:
        json.dump(results, sys.stdout, indent=1)
        print()
    if args.keep is None:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
