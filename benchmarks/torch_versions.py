"""The support matrix over torch releases: which scripts emulate and predict under each torch.

For every torch version asked for, a virtual environment with that torch from the registry and this
checkout of Maya installed beside it (`scripts/torch_env`, which keeps that torch), a fresh build of
the emulator's stubs (timed), then each workload emulated (`maya emulate`, with `--iterations`) and
predicted (`maya predict`) in that environment. Prints one row per (torch, workload): the outcome,
calls, APIs that were not emulated, and the last line of any error, and records them in
`benchmarks/results/torch_versions.json` (a release run again replaces its rows); `--markdown` prints the
stored matrix as the table of docs/frameworks-and-versions.md.

    .venv/bin/python benchmarks/torch_versions.py --torch 2.5.1 2.7.1 2.15.0
    .venv/bin/python benchmarks/torch_versions.py --torch 2.6.0 --workloads train_gpt ddp_mlp --keep

Environments are created under `--envs` (default a temporary folder, removed afterwards unless
`--keep`): each takes ~6 GB (hard links into uv's cache where the file system allows).
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

REPO = Path(__file__).resolve().parents[1]
WORKLOADS = REPO / "tests" / "workloads"
EXAMPLE = REPO / "src" / "maya" / "examples" / "train_gpt.py"
RESULTS = REPO / "benchmarks" / "results" / "torch_versions.json"
"""The measured matrix: torch release -> its CUDA, the stub build's seconds, the date and one row per workload."""

CASES = {  # name -> (maya emulate options, script, script arguments)
    "train_gpt": ([], EXAMPLE, []),
    "linear_bf16": ([], WORKLOADS / "linear_bf16.py", ["--tokens", "64"]),
    "sdpa_bf16": ([], WORKLOADS / "sdpa_bf16.py", ["--causal"]),
    "fp16_grad_scaler": ([], WORKLOADS / "fp16_grad_scaler.py", []),
    "checkpointing": ([], WORKLOADS / "checkpointing.py", []),
    "compiled_mlp": ([], WORKLOADS / "compiled_mlp.py", []),
    "conv_net": ([], WORKLOADS / "conv_net.py", []),
    "lstm_classifier": ([], WORKLOADS / "lstm_classifier.py", ["--steps", "2"]),
    "cuda_graph": ([], WORKLOADS / "cuda_graph.py", []),
    "trunc_normal_init": ([], WORKLOADS / "trunc_normal_init.py", []),
    "gpu_tools": ([], WORKLOADS / "gpu_tools.py", []),
    "long_training": (["--iterations", "4"], WORKLOADS / "long_training.py", []),
    "ddp_mlp": (["--nproc-per-node", "2"], WORKLOADS / "ddp_mlp.py", []),
    "fsdp2_mlp": (["--nproc-per-node", "2"], WORKLOADS / "fsdp2_mlp.py", []),
    "tensor_parallel_mlp": (["--nproc-per-node", "2"], WORKLOADS / "tensor_parallel_mlp.py", []),
    "fsdp_tp_mesh": (["--nproc-per-node", "4"], WORKLOADS / "fsdp_tp_mesh.py", []),
    "nccl_in_cuda_graph": (["--nproc-per-node", "2"], WORKLOADS / "nccl_in_cuda_graph.py", []),
    "pipeline_gpt": (["--nproc-per-node", "2"], WORKLOADS / "pipeline_gpt.py", []),
}
REQUIREMENTS = {"gpu_tools": ["nvidia-ml-py"]}
"""What a workload imports beyond torch and Maya (the `test` extra has them): installed into the environments
this script creates, as the script's user would have them."""

EMULATE = """
import json, sys
from pathlib import Path
from maya.emulator.launcher import emulate
from maya.emulator.launcher import Topology
argv, out, nproc, iterations = json.loads(sys.argv[1])
r = emulate(argv, Path(out), topology=Topology(nproc_per_node=nproc), iterations=iterations)
print("MAYA_RESULT " + json.dumps({"status": r.status, "ranks": [
    {"status": k.status, "calls": k.calls, "unimplemented": k.unimplemented,
     "error": (k.error or "").strip().splitlines()[-1:]} for k in r.ranks]}))
"""


def _env(version: str, envs: Path, workloads: list[str]) -> Path | None:
    """The environment's directory, created by scripts/torch_env, with the workloads' REQUIREMENTS; None if
    the wheel cannot be fetched."""
    target = envs / f"torch-{version}"
    p = subprocess.run([str(REPO / "scripts" / "torch_env"), version, str(target)], capture_output=True, text=True)
    if p.returncode == 3:
        print(f"torch {version}: skipped: {p.stderr.strip()}", file=sys.stderr)
        return None
    if p.returncode:
        raise SystemExit(f"torch {version}: scripts/torch_env failed:\n{p.stderr}")
    extra = sorted({r for name in workloads for r in REQUIREMENTS.get(name, ())})
    if extra:
        subprocess.run(
            [
                str(REPO / ".venv" / "bin" / "uv"),
                "pip",
                "install",
                "--quiet",
                "--python",
                str(target / "bin" / "python"),
                *extra,
            ],
            check=True,
        )
    return target


def _torch_version(python: Path) -> str:
    code = "import importlib.metadata as m; print(m.version('torch').split('+')[0])"
    return subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True).stdout.strip()


def _build_seconds(python: Path, home: Path) -> tuple[float, str]:
    code = (
        "import sys, time; from pathlib import Path; from maya.emulator.build import build, built_release; "
        "t = time.perf_counter(); d = build(Path(sys.argv[1])); s = time.perf_counter() - t; "
        "print(s, 'CUDA', built_release(d)['version'])"
    )
    p = subprocess.run([str(python), "-c", code, str(home / "emulator")], capture_output=True, text=True)
    if p.returncode:  # the first compiler error names the cause; the traceback's last line is often a caret
        lines = p.stderr.strip().splitlines() or ["?"]
        return float("nan"), "build failed: " + next((x.strip() for x in lines if "error:" in x), lines[-1])
    seconds, cuda = p.stdout.split(maxsplit=1)
    return float(seconds), cuda.strip()


def _case(python: Path, home: Path, name: str) -> dict:
    options, script, args = CASES[name]
    nproc = int(options[options.index("--nproc-per-node") + 1]) if "--nproc-per-node" in options else 1
    iterations = int(options[options.index("--iterations") + 1]) if "--iterations" in options else 20
    out = home / "runs" / name
    # Inductor's and Triton's caches in the release's home: compiled_mlp autotunes afresh on every run (a cache
    # left by an earlier run of the same torch answers instead: 138 calls, not 149,360, under torch 2.6.0)
    env = {
        **os.environ,
        "MAYA_HOME": str(home),
        "MAYA_EMULATOR_CACHE": str(home / "emulator"),
        "TORCHINDUCTOR_CACHE_DIR": str(home / "inductor"),
        "TRITON_CACHE_DIR": str(home / "triton"),
    }
    t = time.perf_counter()
    p = subprocess.run(
        [str(python), "-c", EMULATE, json.dumps([[str(script), *args], str(out), nproc, iterations])],
        capture_output=True,
        text=True,
        env=env,
        cwd=home,
    )
    row = {"workload": name, "seconds": round(time.perf_counter() - t, 1)}
    line = next((x for x in p.stdout.splitlines() if x.startswith("MAYA_RESULT ")), None)
    if line is None:
        return {**row, "outcome": "error", "error": (p.stderr.strip().splitlines() or ["?"])[-1]}
    result = json.loads(line.removeprefix("MAYA_RESULT "))
    unimplemented = sorted({k for r in result["ranks"] for k in r["unimplemented"]})
    errors = [e for r in result["ranks"] for e in r["error"]]
    row.update(
        calls=sum(r["calls"] for r in result["ranks"]), unimplemented=unimplemented, error=errors[0] if errors else ""
    )
    if result["status"] != "complete":
        return {**row, "outcome": f"emulate {result['status']}"}
    maya = python.parent / "maya"
    p = subprocess.run([str(maya), "predict", str(out), "--json"], capture_output=True, text=True, env=env, cwd=home)
    if p.returncode:
        return {**row, "outcome": "predict failed", "error": (p.stderr.strip().splitlines() or ["?"])[-1]}
    prediction = json.loads(p.stdout.strip().splitlines()[-1])
    ms = prediction.get("iteration_ms") or prediction.get("iteration_time_ms")
    return {**row, "outcome": "ok", "iteration_ms": ms}


def _store(version: str, cuda: str, build_s: float, rows: list[dict]) -> None:
    """Record one release's rows in RESULTS (a workload run again replaces its row; the others stay)."""
    stored = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    entry = stored.get(version, {"rows": []})
    kept = [r for r in entry["rows"] if r["workload"] not in {r["workload"] for r in rows}]
    order = list(CASES)
    merged = sorted(kept + rows, key=lambda r: order.index(r["workload"]) if r["workload"] in order else len(order))
    stored[version] = {
        "torch": version,
        "cuda": cuda,
        "build_s": round(build_s, 1) if build_s == build_s else None,
        "measured": time.strftime("%Y-%m-%d"),
        "rows": merged,
    }
    ordered = dict(sorted(stored.items(), key=lambda kv: tuple(int(x) for x in kv[0].split(".") if x.isdigit())))
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    tmp = RESULTS.with_suffix(".tmp")
    tmp.write_text(json.dumps(ordered, indent=1) + "\n")
    os.replace(tmp, RESULTS)


def markdown(stored: dict) -> str:
    """The table of docs/frameworks-and-versions.md: one line per release (workloads ok / failed, the stub build), then each failure."""
    lines = ["| torch | CUDA | workloads ok | failed | stub build s | measured |", "|---|---|---|---|---|---|"]
    failures = []
    for entry in stored.values():
        ok = [r for r in entry["rows"] if r["outcome"] == "ok"]
        bad = [r for r in entry["rows"] if r["outcome"] != "ok"]
        lines.append(
            f"| {entry['torch']} | {entry['cuda'].removeprefix('CUDA ')} | {len(ok)} / {len(entry['rows'])} | "
            f"{', '.join(r['workload'] for r in bad) or '-'} | {entry['build_s']} | {entry['measured']} |"
        )
        failures += [
            f"- torch {entry['torch']}, {r['workload']}: {r['outcome']}"
            + (f" (not emulated: {', '.join(r['unimplemented'])})" if r.get("unimplemented") else "")
            + (f": {r['error'][:160]}" if r.get("error") else "")
            for r in bad
        ]
    return "\n".join(lines + ([""] + failures if failures else []))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--torch", nargs="+", default=["2.5.1", "2.15.0"], help="torch versions from the registry")
    ap.add_argument(
        "--python",
        nargs="+",
        type=Path,
        default=[],
        help="existing environments' interpreters (Maya installed) to measure instead",
    )
    ap.add_argument("--workloads", nargs="+", default=list(CASES), choices=list(CASES))
    ap.add_argument("--envs", type=Path, help="where the environments are created (default: a temporary folder)")
    ap.add_argument("--keep", action="store_true", help="keep the environments and runs")
    ap.add_argument("--no-store", action="store_true", help=f"do not record the rows in {RESULTS.relative_to(REPO)}")
    ap.add_argument("--markdown", action="store_true", help="print the stored matrix as the docs' table and exit")
    args = ap.parse_args()
    if args.markdown:
        print(markdown(json.loads(RESULTS.read_text())))
        return
    envs = args.envs or Path(tempfile.mkdtemp(prefix="maya-torch-envs-"))
    envs.mkdir(parents=True, exist_ok=True)
    existing = {_torch_version(p): p.absolute().parent.parent for p in args.python}
    try:
        for version in existing or args.torch:
            env = existing.get(version) or _env(version, envs, args.workloads)
            if env is None:
                continue
            home = envs / f"home-{version}"
            shutil.rmtree(home, ignore_errors=True)
            home.mkdir()
            seconds, cuda = _build_seconds(env / "bin" / "python", home)
            print(f"torch {version} ({cuda}): stubs built in {seconds:.1f} s", flush=True)
            rows = []
            for name in args.workloads:
                if cuda.startswith("build failed"):  # every workload would build again and fail the same way
                    row = {"workload": name, "seconds": 0.0, "outcome": "not run", "error": cuda}
                else:
                    row = _case(env / "bin" / "python", home, name)
                rows.append(row)
                print(json.dumps({"torch": version, "cuda": cuda, **row}), flush=True)
            if not args.no_store:
                _store(version, cuda, seconds, rows)
            if not args.keep and version not in existing:
                shutil.rmtree(env, ignore_errors=True)
                shutil.rmtree(home, ignore_errors=True)
    finally:
        if not args.keep and not args.envs:
            shutil.rmtree(envs, ignore_errors=True)


if __name__ == "__main__":
    main()
