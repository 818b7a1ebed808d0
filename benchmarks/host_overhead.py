"""Host time: what Maya's recording costs between device calls, and the framework time a trace holds (issues 27, 28).

- `costs`: the same loops of eager ops on small CPU tensors (an `add_`, an `mm`, a `Linear` module, ten nested
  `Identity` modules, a forward + backward) timed in thread CPU time in a plain interpreter and under
  `maya emulate` (the op observer and module hooks installed: CPU ops are observed as device ops are); the
  difference per op is the recording's cost (`durations.framework.OBSERVER_OP_NS`, `MODULE_HOOK_NS`), and one
  Triton launch description (`LaunchNotes.launch`, six arguments) is timed alone (`TRITON_NOTE_NS`);
- `RUN ...`: per captured rank and iteration of each trace (as the simulator finds them), its device calls, the
  raw wall gaps between them on the issuing threads and the framework time `durations.framework` keeps from them
  (recording costs taken off, none in the first iteration, the others read robustly), with the stubs' own median
  cost per call (`duration_ns`); where the calls carry the issuing thread's CPU clock (spec 1.7), the raw CPU
  gaps and the framework time kept from them too (what the simulator reads).

Thread CPU time does not count other processes or a thread's sleep; wall gaps do (the wall reading takes the
shortest over iterations for that reason). Run it on the machine that emulates: the costs scale with its CPU.
Usage: python benchmarks/host_overhead.py costs | RUN [RUN ...]
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PROBE = """
import json, time, torch
torch.set_num_threads(1)
x = torch.ones(16); a = torch.ones(8, 8); lin = torch.nn.Linear(8, 8)
identities = torch.nn.Sequential(*[torch.nn.Identity() for _ in range(10)])
def bench(fn, n=20000):
    for _ in range(200): fn()
    best = float("inf")
    for _ in range(5):
        t0 = time.thread_time_ns()
        for _ in range(n): fn()
        best = min(best, (time.thread_time_ns() - t0) / n)
    return best
with torch.no_grad():
    out = {"add_": bench(lambda: x.add_(1)), "mm": bench(lambda: torch.mm(a, a)),
           "linear_module": bench(lambda: lin(a)), "10_identity_modules": bench(lambda: identities(a))}
x.requires_grad_()
out["mul_sum_backward"] = bench(lambda: (x * 2).sum().backward(), 2000)
print("HOST_PROBE", json.dumps(out))
"""


def probe(emulated: bool) -> dict[str, float]:
    """ns per loop body in thread CPU time, in a plain interpreter or under `maya emulate`."""
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "probe.py"
        script.write_text(PROBE)
        if not emulated:
            text = subprocess.run([sys.executable, str(script)], check=True, capture_output=True, text=True).stdout
        else:
            out = Path(tmp) / "run"
            maya = Path(sys.executable).with_name("maya")
            subprocess.run([str(maya), "emulate", "--out", str(out), "--", "python", str(script)], check=True)
            text = (out / "logs" / "rank0.txt").read_text()
    line = next(line for line in text.splitlines() if line.startswith("HOST_PROBE"))
    return json.loads(line.split(" ", 1)[1])


def triton_note_ns() -> float:
    """One six-argument Triton launch description (`LaunchNotes.launch`), thread CPU ns."""
    import torch

    from maya.emulator.triton_launches import LaunchNotes

    with tempfile.TemporaryDirectory() as tmp:
        notes = LaunchNotes(Path(tmp), lambda note: None)
        args = (*(torch.empty(4, 4) for _ in range(4)), 786432, 768)
        names = ["in_ptr0", "in_ptr1", "in_ptr2", "out_ptr0", "xnumel", "rnumel"]
        best = float("inf")
        for _ in range(5):
            t0 = time.thread_time_ns()
            for _ in range(20000):
                notes.launch("triton_red_fused", names, args, (("XBLOCK", 1),), 1)
            best = min(best, (time.thread_time_ns() - t0) / 20000)
    return best


def costs() -> None:
    plain, emulated = probe(False), probe(True)
    print(f"{'loop body':<22}{'plain ns':>10}{'emulated ns':>13}{'added ns':>10}")
    for name in plain:
        print(f"{name:<22}{plain[name]:>10.0f}{emulated[name]:>13.0f}{emulated[name] - plain[name]:>10.0f}")
    print(f"Triton launch description: {triton_note_ns():.0f} ns")


def framework(run: str) -> None:
    import numpy as np

    from maya.simulator.durations.framework import framework_ns, has_cpu_clock, issuing_rows
    from maya.simulator.iterations import detect
    from maya.simulator.opcodes import DEVICE_OPS, classify
    from maya.simulator.trace import load

    for rank, trace in load(run).ranks.items():
        calls = trace.calls
        opcodes = classify(calls)
        iterations = detect(trace, opcodes)
        wall = calls.drop(columns=["cpu_start_ns", "cpu_duration_ns"], errors="ignore")
        clocked = has_cpu_clock(calls, issuing_rows(calls, opcodes))  # as framework_ns reads it
        readings = {"wall": wall} | ({"CPU": calls} if clocked else {})
        host = (calls["domain"] != "device").to_numpy()
        stub = float(np.nanmedian(calls["duration_ns"].to_numpy(dtype="float64", na_value=np.nan)[host]))
        for it in range(iterations.count):
            rows = np.zeros(len(calls), bool)
            rows[iterations.bounds[it] : iterations.bounds[it + 1]] = True
            device = int((np.isin(opcodes, DEVICE_OPS) & host & rows).sum())
            read = []
            for clock, frame in readings.items():
                kept = framework_ns(frame, trace.ops, opcodes, iterations)
                raw = framework_ns(frame, trace.ops.iloc[:0], opcodes, None)
                read.append(
                    f"{clock}: raw gaps {raw[rows].sum() / 1e6:.2f} ms, framework {kept[rows].sum() / 1e6:.2f} ms"
                )
            print(
                f"{run} rank {rank} iteration {it}: {device} device calls, {'; '.join(read)}, stub median {stub:.0f} ns"
            )


if __name__ == "__main__":
    if sys.argv[1:] == ["costs"]:
        costs()
    elif sys.argv[1:]:
        for run in sys.argv[1:]:
            framework(run)
    else:
        sys.exit(__doc__)
