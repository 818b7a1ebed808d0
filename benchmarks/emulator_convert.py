"""Capture conversion memory: the peak RSS of converting a rank's raw capture stays bounded as the
capture grows (issue 18: a 5.4 GB capture took `maya emulate` past 15 GB).

Synthesizes raw captures (two threads of kernel launches, allocations and one op per call, nested in
module ranges, as the emulator writes them) of growing size, converts each in a fresh process
(`convert.write_rank`) and prints the capture's size, the converter's peak RSS (less the RSS of a process
that only imports it) and the time.
Usage: python benchmarks/emulator_convert.py [--records 1000000 4000000]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from maya.emulator.capture_format import K_ALLOC, K_LAUNCH, OP_ENTER, OP_RECORD_DTYPE, RECORD_DTYPE

CONVERT = """
import sys
from pathlib import Path
from maya.emulator.convert import write_rank
from maya_trace_spec import RunWriter
if len(sys.argv) > 1:
    out = Path(sys.argv[2])
    RunWriter(out).write("run", {"run_id": ["bench"], "created_at_ns": [0], "source": ["emulator"],
                                 "status": ["complete"], "command": ["[]"], "world_size": [1]})
    write_rank(Path(sys.argv[1]), RunWriter(out), 0)
"""


def synthesize(raw: Path, records: int, threads: int = 2, block: int = 1 << 20) -> None:
    """`records` call records over `threads` thread files (every 8th an allocation) and their ops: one
    aten op per call inside a module range per 64 calls. Written `block` records at a time, so that
    this process stays small (a child forked from it starts with its memory)."""
    raw.mkdir(parents=True)
    (raw / "apis.tsv").write_text("0\tcudaLaunchKernel\n1\t<memory>\n")
    (raw / "kernels.tsv").write_text("".join(f"{k}\tkernel_{k}\n" for k in range(32)))
    (raw / "op_strings.tsv").write_text(
        '0\tnn.Module: Model.layer\n1\taten::mm\n2\t{"s":[[64,64],[64,64]],"t":["float","float"]}\n'
    )
    (raw / "status.json").write_text(json.dumps({"status": "complete", "exit_code": 0}))
    per_thread = records // threads
    for t in range(threads):
        with (
            open(raw / f"calls-{1000 + t}.bin", "ab") as calls_file,
            open(raw / f"ops-{1000 + t}.bin", "ab") as ops_file,
        ):
            for start in range(0, per_thread, block):
                index = np.arange(start, min(start + block, per_thread))
                calls = np.zeros(len(index), RECORD_DTYPE)
                calls["seq"] = index * threads + t
                calls["tid"] = 1000 + t
                calls["start_ns"] = calls["seq"] * 100
                alloc = calls["seq"] % 8 == 0
                calls["kind"] = np.where(alloc, K_ALLOC, K_LAUNCH)
                calls["api"] = np.where(alloc, 1, 0)
                calls["a"][:, 0] = np.where(alloc, 1 << 30, calls["seq"] % 32)
                calls["a"][:, 1] = np.where(alloc, 4096, 128)
                calls["a"][:, 2] = np.where(alloc, calls["seq"] % 4096 * 4096, 1)
                calls["op"] = (index // 64 * 65 + index % 64 + 1) * threads + t  # op ids interleave by thread
                calls.tofile(calls_file)
                slots = np.arange(start // 64 * 65, (index[-1] // 64 + 1) * 65)  # whole blocks of 65 ops
                slots = slots[slots >= start // 64 * 65 + (0 if start % 64 == 0 else 65)]
                ops = np.zeros(len(slots), OP_RECORD_DTYPE)
                is_range = slots % 65 == 0
                ops["op_id"] = slots * threads + t
                ops["parent"] = np.where(is_range, -1, slots // 65 * 65 * threads + t)
                ops["t_ns"] = ops["op_id"] * 100
                ops["end_ns"] = ops["op_id"] * 100 + 50
                ops["seq_nr"] = -1
                ops["name_id"] = np.where(is_range, 0, 1)
                ops["inputs_id"] = np.where(is_range, -1, 2)
                ops["kind"] = OP_ENTER
                ops.tofile(ops_file)


def peak_rss_mb(argv: list[str]) -> tuple[float, float]:
    """Peak RSS (MiB) and wall time of `python -c CONVERT argv` run in a child process."""
    t0 = time.perf_counter()
    child = subprocess.Popen([sys.executable, "-c", CONVERT, *argv])
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode:
        raise RuntimeError(f"conversion failed with exit code {child.returncode}")
    return usage.ru_maxrss / 1024, time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, nargs="+", default=[1_000_000, 4_000_000])
    args = parser.parse_args()
    baseline, _ = peak_rss_mb([])
    print(f"baseline (imports only): {baseline:.0f} MiB")
    print(f"{'records':>10} {'capture MiB':>12} {'peak RSS MiB':>13} {'above baseline':>15} {'seconds':>8}")
    for n in args.records:
        tmp = Path(tempfile.mkdtemp(prefix="maya-convert-bench-"))
        try:
            synthesize(tmp / "raw", n)
            size = sum(p.stat().st_size for p in (tmp / "raw").iterdir()) / 2**20
            peak, seconds = peak_rss_mb([str(tmp / "raw"), str(tmp / "run")])
            print(f"{n:>10,} {size:>12.0f} {peak:>13.0f} {peak - baseline:>15.0f} {seconds:>8.1f}")
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
