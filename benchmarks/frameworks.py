"""The framework support matrix: real training frameworks, unchanged, under `maya emulate --iterations`
and `maya predict`, one row per (framework, parallelism, precision).

Each case runs the framework's own entry point on virtual H100s and records whether emulation completed,
the emulation's wall time, the predicted iteration time and MFU, the APIs left unimplemented and the
notes `maya predict` made (assumed routing, fp8 transfer, ...). torchtitan and the speed-run script run in
a working directory of synthetic assets (`tests/framework_assets.py`). Results go to
`benchmarks/results/frameworks.json`; the support matrix of docs/frameworks-and-versions.md is this table (`--markdown` prints it).

Usage: python benchmarks/frameworks.py [--only NAME,...] [--iterations N] [--markdown]
A case whose package is not installed is reported as skipped, naming the package; so is one whose script
lives in a repository (MAYA_MODDED_NANOGPT_REPO: a checkout of KellerJordan/modded-nanogpt; MAYA_NANOGPT_REPO:
one of karpathy/nanoGPT) not set.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
from framework_assets import NANOGPT_ENV, nanogpt_assets, torchtitan_assets, write_fineweb_shards, write_wikitext  # noqa: E402,E501

WORKLOADS = REPO / "tests" / "workloads"
RESULTS = REPO / "benchmarks" / "results" / "frameworks.json"
TITAN = ["python", "-m", "torchtitan.train", "--module"]
SPEEDRUN_ENV = "MAYA_MODDED_NANOGPT_REPO"
ASSETS: dict[str, Callable[[Path], Path]] = {
    "titan": torchtitan_assets,
    "fineweb": write_fineweb_shards,
    "nanogpt": nanogpt_assets,
    "wikitext": write_wikitext,
}
"""Working directories of synthetic assets, by name: each function fills a folder and returns it."""


@dataclass(frozen=True)
class Case:
    name: str
    framework: str
    parallelism: str
    precision: str
    argv: list[str]
    nproc: int = 1
    needs: tuple[str, ...] = ()
    assets: str = ""  # runs in a working directory of ASSETS[assets]
    repo_env: str = ""  # an environment variable naming the checkout `{repo}` in argv stands for
    test: str = ""  # the test that backs the cell in CI, if any


def titan(config: str, *flags: str) -> list[str]:
    return [*TITAN, "llama3", "--config", config, "--training.steps", "10", *flags]


FSDP4_TP2 = ["--parallelism.data_parallel_shard_degree", "4", "--parallelism.tensor_parallel_degree", "2"]
CASES = [
    Case(
        "titan-debug-1gpu",
        "torchtitan 0.3.0",
        "1 GPU (defaults: CUDA graphs)",
        "bf16",
        titan("llama3_debugmodel"),
        1,
        ("torchtitan",),
        "titan",
    ),
    Case(
        "titan-debug-fsdp4-tp2",
        "torchtitan 0.3.0",
        "FSDP2 4 x TP 2",
        "bf16",
        titan("llama3_debugmodel", *FSDP4_TP2),
        8,
        ("torchtitan",),
        "titan",
    ),
    Case(
        "titan-debug-fsdp4-tp2-compile",
        "torchtitan 0.3.0",
        "FSDP2 4 x TP 2 + torch.compile",
        "bf16",
        titan("llama3_debugmodel", *FSDP4_TP2, "--compile.enable"),
        8,
        ("torchtitan",),
        "titan",
    ),
    Case(
        "titan-debug-validation",
        "torchtitan 0.3.0",
        "FSDP2 4 x TP 2, validation every step",
        "bf16",
        titan(
            "llama3_debugmodel",
            *FSDP4_TP2,
            "--validator.enable",
            "--validator.freq",
            "1",
            "--validator.steps",
            "2",
            "--validator.dataloader.dataset",
            "c4_test",
        ),
        8,
        ("torchtitan",),
        "titan",
        test="tests/frameworks/test_torchtitan.py::test_debug_model_fsdp_tp_with_validation",
    ),
    Case(
        "titan-debug-pp2-fsdp4",
        "torchtitan 0.3.0",
        "PP 2 (1F1B) x FSDP2 4",
        "bf16",
        titan(
            "llama3_debugmodel",
            "--parallelism.pipeline_parallel_degree",
            "2",
            "--parallelism.data_parallel_shard_degree",
            "4",
            "--training.disable_cuda_graphs",
        ),
        8,
        ("torchtitan",),
        "titan",
        test="tests/emulator/test_emulate.py::test_a_pipeline_stopped_by_iterations_predicts",
    ),
    Case(
        "titan-debug-float8",
        "torchtitan 0.3.0 + torchao 0.18 (Triton 3.8)",
        "FSDP2 4 x TP 2",
        "fp8 (torchao float8, tensorwise)",
        titan("llama3_debugmodel_float8", *FSDP4_TP2),
        8,
        ("torchtitan", "torchao"),
        "titan",
    ),
    Case(
        "titan-llama3-8b-fsdp8",
        "torchtitan 0.3.0",
        "FSDP2 8",
        "bf16",
        titan(
            "llama3_8b",
            "--hf_assets_path",
            "./tests/assets/tokenizer",
            "--dataloader.dataset",
            "c4_test",
            "--metrics.no-enable-tensorboard",
            "--profiler.no-enable-profiling",
            "--parallelism.data_parallel_shard_degree",
            "8",
        ),
        8,
        ("torchtitan",),
        "titan",
    ),
    Case(
        "titan-moe-debug",
        "torchtitan 0.3.0",
        "1 GPU, MoE (DeepSeek-V3 debug)",
        "bf16",
        [*TITAN, "deepseek_v3", "--config", "deepseek_v3_debugmodel", "--training.steps", "10"],
        1,
        ("torchtitan",),
        "titan",
    ),
    Case(
        "speedrun-modernarch",
        "modded-nanogpt speed-run (2024-10-14 record)",
        "DDP 8 + torch.compile, Muon",
        "bf16 autocast",
        ["python", "{repo}/records/track_1_short/2024-10-14_ModernArch/train_gpt2.py"],
        8,
        assets="fineweb",
        repo_env=SPEEDRUN_ENV,
        test="tests/frameworks/test_speedrun.py::test_speedrun_runs_unchanged_on_eight_h100s",
    ),
    *(
        Case(
            f"nanogpt-{name}",
            "nanoGPT `train.py` (karpathy, 3adf61e1)",
            shape,
            "bf16 autocast",
            ["python", "train.py", f"config/train_{config}.py", *flags],
            gpus,
            assets="nanogpt",
            repo_env=NANOGPT_ENV,
            test="tests/frameworks/test_nanogpt.py::test_nanogpt_ddp_on_four_gpus" if name == "char-ddp4" else "",
        )
        for name, config, shape, gpus, flags in (
            ("char-1gpu", "shakespeare_char", "1 GPU (one-rank DDP), shakespeare_char", 1, ["--compile=False"]),
            ("char-1gpu-compile", "shakespeare_char", "1 GPU (one-rank DDP) + torch.compile, shakespeare_char", 1, []),
            (
                "char-ddp4",
                "shakespeare_char",
                "DDP 4, shakespeare_char",
                4,
                ["--compile=False", "--gradient_accumulation_steps=4"],
            ),
            (
                "gpt2-1gpu",
                "gpt2",
                "1 GPU (one-rank DDP), GPT-2 124M, 40 micro-steps",
                1,
                ["--wandb_log=False", "--compile=False"],
            ),
            ("gpt2-1gpu-compile", "gpt2", "1 GPU (one-rank DDP) + torch.compile, GPT-2 124M", 1, ["--wandb_log=False"]),
            (
                "gpt2-ddp4",
                "gpt2",
                "DDP 4, GPT-2 124M, 10 micro-steps per rank",
                4,
                ["--wandb_log=False", "--compile=False"],
            ),
            ("gpt2-ddp4-compile", "gpt2", "DDP 4 + torch.compile, GPT-2 124M", 4, ["--wandb_log=False"]),
        )
    ),
    *(
        Case(
            f"lightning-{strategy}",
            "PyTorch Lightning 2.6.6 Trainer",
            f"{label} 2",
            "bf16-mixed",
            ["python", str(WORKLOADS / "lightning_lm.py"), "--strategy", strategy],
            2,
            ("lightning",),
            "wikitext",
            test="tests/frameworks/test_lightning.py::test_lightning_trainer_ddp_bf16" if strategy == "ddp" else "",
        )
        for strategy, label in (("ddp", "DDP"), ("fsdp", "FSDP"))
    ),
    Case(
        "accelerate-loop-ddp",
        'accelerate 1.15 custom loop (`Accelerator(mixed_precision="bf16")`)',
        "DDP 2, gradient accumulation 2",
        "bf16",
        ["python", str(WORKLOADS / "accelerate_loop.py")],
        2,
        ("accelerate",),
    ),
    Case(
        "hf-trainer-ddp",
        "transformers Trainer + accelerate",
        "DDP 2",
        "bf16",
        ["python", str(WORKLOADS / "hf_trainer.py"), "--mode", "ddp"],
        2,
        ("transformers", "accelerate"),
        test="tests/frameworks/test_hf.py::test_trainer[ddp]",
    ),
    Case(
        "hf-trainer-fsdp",
        "transformers Trainer + accelerate",
        "FSDP2 2",
        "bf16",
        ["python", str(WORKLOADS / "hf_trainer.py"), "--mode", "fsdp"],
        2,
        ("transformers", "accelerate"),
    ),
    *(
        Case(
            f"hf-deepspeed-zero{z}",
            "transformers Trainer + DeepSpeed",
            f"ZeRO-{z}, 2 GPUs",
            "bf16",
            ["python", str(WORKLOADS / "hf_trainer.py"), "--mode", f"zero{z}"],
            2,
            ("transformers", "accelerate", "deepspeed"),
            test="tests/frameworks/test_hf.py::test_trainer[zero3]" if z == 3 else "",
        )
        for z in (1, 2, 3)
    ),
    Case(
        "float8-mlp",
        "PyTorch `_scaled_mm` (torchao's tensorwise recipe)",
        "1 GPU",
        "fp8 e4m3/e5m2",
        ["python", str(WORKLOADS / "float8_mlp.py")],
        1,
        test="tests/frameworks/test_float8.py::test_float8_gemms_priced_on_fp8_peak",
    ),
    Case(
        "moe-top1",
        "plain PyTorch MoE",
        "1 GPU",
        "fp32",
        ["python", str(WORKLOADS / "top1_routing.py")],
        1,
        test="tests/emulator/test_host_values.py::test_moe_routes_tokens_to_every_expert",
    ),
]


def maya(*args: str, cwd: Path | None = None, timeout: float = 1800) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "maya", *args], cwd=cwd, capture_output=True, text=True, timeout=timeout
    )


def unimplemented_apis(lines: list[str]) -> list[str]:
    """The last column of emulate's per-rank table ("│ 0 │ complete │ ... │ - │"), read under its header only: a
    script's own tables (Lightning's model summary) are drawn with the same characters."""
    found, inside = [], False
    for line in lines:
        if "unimplemented APIs" in line:
            inside = True
        elif inside and line.startswith("│"):
            if (cell := line.split("│")[-2].strip()) not in ("", "-"):
                found.append(cell)
        elif inside and line.startswith("└"):
            inside = False
    return found


def run_case(case: Case, iterations: int, work: Path) -> dict:
    missing = [p for p in case.needs if importlib.util.find_spec(p) is None]
    row = {
        "name": case.name,
        "framework": case.framework,
        "parallelism": case.parallelism,
        "precision": case.precision,
        "gpus": case.nproc,
        "test": case.test,
    }
    if missing:
        return {**row, "status": f"skipped: {', '.join(missing)} not installed"}
    checkout = os.environ.get(case.repo_env, "") if case.repo_env else ""
    if case.repo_env and not Path(checkout).is_dir():
        return {**row, "status": f"skipped: {case.repo_env} not set to a checkout"}
    argv = [a.replace("{repo}", checkout) for a in case.argv]
    cwd = ASSETS[case.assets](work / case.assets) if case.assets else work
    out = work / "runs" / case.name
    start = time.monotonic()
    try:
        r = maya(
            "emulate",
            "--out",
            str(out),
            "--iterations",
            str(iterations),
            "--nproc-per-node",
            str(case.nproc),
            "--",
            *argv,
            cwd=cwd,
        )
    except subprocess.TimeoutExpired:
        return {**row, "status": "emulation timed out"}
    row["emulate_s"] = round(time.monotonic() - start, 1)
    tail = (r.stdout + r.stderr).strip().splitlines()
    if r.returncode != 0:
        return {
            **row,
            "status": "emulation failed",
            "error": next((line for line in reversed(tail) if "rank " in line), tail[-1:]),
        }
    p = maya("predict", str(out), "--json", cwd=cwd)
    if p.returncode != 0:
        return {**row, "status": "predict failed", "error": (p.stdout + p.stderr).strip().splitlines()[-1:]}
    pred = json.loads(p.stdout)
    unimplemented = unimplemented_apis(tail)
    return {
        **row,
        "status": "ok",
        "iteration_ms": round(pred["iteration_ns"] / 1e6, 2),
        "mfu": pred.get("mfu"),
        "durations": pred.get("durations"),
        "notes": pred.get("notes", []),
        "unimplemented": unimplemented,
    }


def markdown(rows: list[dict]) -> str:
    """The stored measurements under the cases' current descriptions (a row keeps its own where its case is gone)."""
    cases = {c.name: c for c in CASES}
    rows = [
        {
            **r,
            **(
                {k: getattr(cases[r["name"]], k) for k in ("framework", "parallelism", "precision", "test")}
                if r["name"] in cases
                else {}
            ),
        }
        for r in rows
    ]
    lines = [
        "| framework | parallelism | precision | GPUs | status | emulate s | iteration ms | backed by |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        backed = f"`{r['test']}`" if r.get("test") else f"benchmark `{r['name']}`"
        lines.append(
            f"| {r['framework']} | {r['parallelism']} | {r['precision']} | {r['gpus']} | {r['status']} | "
            f"{r.get('emulate_s', '')} | {r.get('iteration_ms', '')} | {backed} |"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="comma-separated case names")
    ap.add_argument("--iterations", type=int, default=3)
    ap.add_argument("--markdown", action="store_true", help="print the stored results as the docs' table")
    a = ap.parse_args()
    if a.markdown:
        print(markdown(json.loads(RESULTS.read_text())))
        return
    wanted = set(filter(None, a.only.split(",")))
    stored = {r["name"]: r for r in json.loads(RESULTS.read_text())} if RESULTS.exists() else {}
    with tempfile.TemporaryDirectory(prefix="maya-frameworks-") as tmp:
        for case in CASES:
            if wanted and case.name not in wanted:
                continue
            row = run_case(case, a.iterations, Path(tmp))
            print(json.dumps(row), flush=True)
            if row["status"].startswith("skipped") and case.name in stored:
                continue  # a case that could not run here keeps the result measured where it could
            stored[case.name] = {**row, "measured": time.strftime("%Y-%m-%d")}
    order = [c.name for c in CASES]
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    tmp_file = RESULTS.with_suffix(".tmp")
    tmp_file.write_text(
        json.dumps(
            sorted(stored.values(), key=lambda r: order.index(r["name"]) if r["name"] in order else len(order)),
            indent=1,
        )
        + "\n"
    )
    os.replace(tmp_file, RESULTS)
    print(markdown([stored[n] for n in order if n in stored]))


if __name__ == "__main__":
    main()
