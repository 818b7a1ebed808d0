"""`maya emulate` on scripts as they are written: loops on device values, bounded runs, the GPU tools
scripts call, NCCL inside CUDA graphs, the peak memory it reports, and conversion of captures."""

import json
import re
import shutil
from collections import Counter

import pyarrow.compute as pc
import pytest
from paths import WORKLOADS
from typer.testing import CliRunner

from maya.cli.app import app
from maya.cli.emulate import DEFAULT_ITERATIONS
from maya.core import hardware
from maya.emulator import convert
from maya.emulator.launcher import emulate as emulate_run
from maya.emulator.nvidia_smi import main as nvidia_smi
from maya.simulator import simulate, summarize
from maya.simulator.iterations import detect
from maya.simulator.program import compile_rank
from maya.simulator.report import memory_peak
from maya.simulator.trace import load
from maya_trace_spec import Run, RunWriter, read_table
from maya_trace_spec.validation import validate_run

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
runner = CliRunner()


def emulate(tmp_path, *args, script, script_args=()):
    out = tmp_path / "run"
    r = runner.invoke(
        app, ["emulate", "--out", str(out), *args, "--", "python", str(WORKLOADS / script), *map(str, script_args)]
    )
    return r, out


def stand_ins(calls) -> list[str]:
    return [json.loads(c["args"])["stand_in"] for c in calls if c["args"] and "stand_in" in c["args"]]


def test_copies_and_memsets_record_their_bytes(tmp_path):
    """A copy's and a memset's byte count is what the simulator prices them by (0 bytes priced them as free)."""
    r, out = emulate(tmp_path, script="copy_bytes.py")
    assert r.exit_code == 0, r.output
    calls = Run(out).table("api_calls").to_pylist()
    copies = [(c["memcpy_kind"], c["bytes"]) for c in calls if c["api"].startswith("cudaMemcpy")]
    memsets = [c["bytes"] for c in calls if c["api"].startswith("cudaMemset")]
    assert copies == [("HtoD", 16384), ("DtoH", 16384), ("DtoD", 8192)]
    assert memsets == [65536]


def test_trunc_normal_init_ends(tmp_path):
    """torch's trunc_normal_ rejection loop reads `mask.any()`; the device bytes (1s) would never say the
    mask is empty: the repeated read gets a zero stand-in and the loop ends."""
    r, out = emulate(tmp_path, script="trunc_normal_init.py")
    assert r.exit_code == 0, r.output
    assert "initialised and trained" in r.output
    calls = Run(out).table("api_calls").to_pylist()
    reads = [c for c in calls if c["memcpy_kind"] == "DtoH" and c["bytes"] == 1]
    assert reads and all(c["data_dependent"] for c in reads)
    assert "zero" in stand_ins(reads)  # what ended the loops
    assert len(reads) <= 4 * 8  # 8 tensors initialised, a few passes each


def test_loops_on_device_values_end(tmp_path):
    r, out = emulate(tmp_path, script="device_value_loops.py")
    assert r.exit_code == 0, r.output
    passes = {name: int(n) for name, n in re.findall(r"(\w+(?: \w+)?) loop ended after (\d+) passes", r.output)}
    assert set(passes) == {"flag", "sticky flag", "convergence"}
    assert max(passes.values()) <= 3
    # values only a GPU computes read 0 first ("unknown"); the loops that go on get the flipped stand-in
    assert {"unknown", "one"} <= set(stand_ins(Run(out).table("api_calls").to_pylist()))


def test_a_loop_no_stand_in_ends_is_stopped_naming_its_op(tmp_path, monkeypatch):
    monkeypatch.setenv("MAYA_EMU_LOOP_LIMIT", "50")
    r, out = emulate(tmp_path, script="device_value_loops.py", script_args=["--endless"])
    assert r.exit_code == 1
    assert "maya emulator stopped the rank" in r.output
    assert "aten::item > aten::_local_scalar_dense" in r.output
    assert "device_value_loops.py:" in r.output  # the script line of the loop
    run = Run(out)
    assert run.info["status"] == "failed"
    assert run.table("api_calls").num_rows < 2000  # stopped, not grown


def test_iterations_bound_a_long_script(tmp_path):
    """A script written for 10,000 steps (two optimizers per step, validation every 3) stops after 4
    iterations; the validation passes inside the bound are traced as phase eval and the iterations
    holding them are not steady."""
    r, out = emulate(tmp_path, "--iterations", "4", script="long_training.py")
    assert r.exit_code == 0, r.output
    assert "stopped after 4 training iterations (--iterations 4)" in r.output
    assert "finished all steps" not in r.output
    assert re.findall(r"step (\d+): validation", r.output) == ["0", "3"]
    assert validate_run(out) == []
    run = Run(out)
    assert json.loads(run.info["attrs"])["stopped_at_iteration"] == {"0": 4}
    ops = run.table("ops").to_pandas()
    steps = ops[ops["name"].str.startswith("Optimizer.step#")]
    # both optimizers' steps, in the iteration whose backward they follow: AdamW's ends it, SGD's belongs to it
    assert steps.groupby("iteration").size().tolist() == [2, 2, 2, 2]
    evaluating = ops[ops["phase"] == "eval"]
    assert sorted(evaluating["iteration"].unique().tolist()) == [0, 3]
    assert set(evaluating["name"]) >= {"maya::eval", "aten::linear"}
    trace = load(out).ranks[0]
    iterations = detect(trace, compile_rank(trace).opcodes)
    assert iterations.source == "ops" and iterations.count == 4  # the trace ends with iteration 3 whole
    assert iterations.steady.tolist() == [1, 2]  # 0 holds init, 3 a validation
    # the prediction says what the validation passes it leaves out took, so a user can spread them over k steps
    traces = load(out)
    notes = summarize(simulate(traces, hardware.get("h100-sxm"), "roofline")).notes
    note = next(n for n in notes if n.startswith("evaluation passes are not in the steady state"))
    assert re.findall(r"rank 0, iteration (\d): [\d.,]+ ms \(1 model call\)", note) == ["0", "3"], note


def test_optimizers_stepped_inside_the_backward_end_one_iteration(tmp_path):
    """An optimizer per parameter, stepped by its gradient's hook (torchtune's `optimizer_in_bwd`): 6 steps inside
    each backward end one iteration when the backward ends, not 6 (which stopped `--iterations 3` inside the first
    backward)."""
    out, ops = _three_iterations(tmp_path, "optimizer_in_backward.py")
    steps = ops[ops["name"].str.startswith("Optimizer.step#")]
    assert steps.groupby("iteration").size().tolist() == [6, 6, 6]
    assert ops.groupby("iteration")["phase"].apply(lambda p: {"forward", "backward"} <= set(p)).all()
    trace = load(out).ranks[0]
    iterations = detect(trace, compile_rank(trace).opcodes)
    assert iterations.source == "ops" and iterations.count == 3 and iterations.steady.tolist() == [1, 2]


def test_steps_inside_a_reentrant_checkpoints_backward_end_the_outermost_backwards_iteration(tmp_path):
    """Reentrant activation checkpointing runs each block's backward inside the loss's: its parameters' steps end
    one iteration when the loss's backward ends (each inner backward ended one: `--iterations 3` stopped inside the
    first backward, 2 steps an iteration)."""
    _, ops = _three_iterations(tmp_path, "reentrant_optimizer_in_backward.py")
    steps = ops[ops["name"].str.startswith("Optimizer.step#")]
    assert steps.groupby("iteration").size().tolist() == [8, 8, 8]


def _three_iterations(tmp_path, script: str):
    """`maya emulate --iterations 3` of a workload: the run and its ops, once it says it stopped after 3."""
    r, out = emulate(tmp_path, "--iterations", "3", script=script)
    assert r.exit_code == 0, r.output
    assert "stopped after 3 training iterations (--iterations 3)" in r.output
    return out, Run(out).table("ops").to_pandas()


def test_iterations_stop_every_rank_at_the_same_one(tmp_path):
    r, out = emulate(tmp_path, "--iterations", "2", "--nproc-per-node", "2", "--no-dedup", script="ddp_mlp.py")
    assert r.exit_code == 0, r.output
    assert json.loads(Run(out).info["attrs"])["stopped_at_iteration"] == {"0": 2, "1": 2}


def test_iterations_say_when_they_cannot_bound_a_script(tmp_path):
    """--iterations counts optimizer steps: a script that updates its weights by hand (as pytorch/examples'
    word_language_model does) runs to its end, and emulate says so rather than nothing."""
    script = tmp_path / "manual_sgd.py"
    script.write_text(
        "import torch\n"
        "model = torch.nn.Linear(64, 64).cuda()\n"
        "x = torch.randn(8, 64, device='cuda')\n"
        "for step in range(5):\n"
        "    model.zero_grad()\n"
        "    model(x).square().mean().backward()\n"
        "    with torch.no_grad():\n"
        "        for p in model.parameters():\n"
        "            p.add_(p.grad, alpha=-0.1)\n"
        "print('all 5 steps done')\n"
    )
    out = tmp_path / "run"
    r = runner.invoke(
        app, ["emulate", "--out", str(out), "--iterations", "2", "--", "python", str(script)], terminal_width=400
    )
    assert r.exit_code == 0, r.output
    assert "all 5 steps done" in r.output
    assert "--iterations 2 did not bound this run" in r.output and "made none" in r.output
    assert "stopped after" not in r.output
    # with an optimizer the same bound stops it, and the note is not printed
    optimized = script.read_text().replace(
        "model = torch.nn.Linear(64, 64).cuda()\n",
        "model = torch.nn.Linear(64, 64).cuda()\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n",
    )
    optimized = optimized.replace(
        "    with torch.no_grad():\n        for p in model.parameters():\n            p.add_(p.grad, alpha=-0.1)\n",
        "    opt.step()\n",
    )
    script.write_text(optimized)
    r = runner.invoke(
        app,
        ["emulate", "--out", str(tmp_path / "run2"), "--iterations", "2", "--", "python", str(script)],
        terminal_width=400,
    )
    assert r.exit_code == 0, r.output
    assert "stopped after 2 training iterations" in r.output and "did not bound" not in r.output


def test_iterations_default_is_stated():
    r = runner.invoke(app, ["emulate", "--help"], terminal_width=200)
    assert "--iterations" in r.output and f"[default: {DEFAULT_ITERATIONS}]" in r.output


def test_nvidia_smi_and_nvml(tmp_path):
    r, out = emulate(tmp_path, script="gpu_tools.py")
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    gpu_row = next(
        line for line in lines if "NVIDIA H100 80GB HBM3" in line and "Persistence" not in line and line.startswith("|")
    )
    assert len(gpu_row) == 91 and "00000000:01:00.0" in gpu_row
    assert any("1024MiB /  81559MiB" in line for line in lines)
    assert any(re.fullmatch(r"GPU 0: NVIDIA H100 80GB HBM3 \(UUID: GPU-[0-9a-f-]{36}\)", line) for line in lines)
    assert "query: 0, NVIDIA H100 80GB HBM3, 1024, 81559, 0" in r.output
    assert "pynvml: NVIDIA H100 80GB HBM3 used=1073741824 total=85520809984 util=0" in r.output
    assert "torch: used=1073741824 utilization=0 memory_usage=0" in r.output
    # an NVML call Maya does not emulate fails loudly, by name, and is counted
    assert "unimplemented CUDA API nvmlDeviceGetEncoderUtilization" in r.output
    calls = Run(out).table("api_calls")
    nvml = calls.filter(pc.field("domain") == "nvml").to_pylist()
    assert {"nvmlInitWithFlags", "nvmlDeviceGetMemoryInfo", "nvmlDeviceGetUtilizationRates"} <= {c["api"] for c in nvml}
    assert [c["status"] for c in nvml if c["api"] == "nvmlDeviceGetEncoderUtilization"] == [-1]


@pytest.mark.parametrize(
    "args, message",
    [
        (["--query-gpu=name"], "--query-gpu requires --format=csv"),
        (["--query-gpu=name,bogus", "--format=csv"], 'Field "bogus" is not a valid field to query.'),
        (["-q"], "option '-q' is not emulated"),
    ],
)
def test_nvidia_smi_refuses_what_it_does_not_answer(capsys, args, message):
    assert nvidia_smi(args) == 2
    assert message in capsys.readouterr().err


def test_nccl_collectives_captured_in_a_cuda_graph(tmp_path):
    """An async all-reduce captured in a graph makes torch keep its work alive with a CUDA user object."""
    r, out = emulate(tmp_path, "--nproc-per-node", "2", script="nccl_in_cuda_graph.py")
    assert r.exit_code == 0, r.output
    calls = Run(out).table("api_calls").to_pylist()
    apis = [c["api"] for c in calls]
    assert apis.count("cudaUserObjectCreate") == apis.count("cudaGraphRetainUserObject") == 1
    assert all(c["status"] == 0 for c in calls if "UserObject" in c["api"])
    replayed = [c for c in calls if c["collective_name"] and c["args"] and "cuda_graph_replay" in c["args"]]
    assert len(replayed) == 3 * 4  # four gradients, three replays


def test_cuda_graph_replays_cost_the_host_one_launch(tmp_path):
    """A training step replayed as CUDA graphs (`make_graphed_callables`) issues its kernels with one launch each for
    forward and backward: the step is predicted faster than the same step run eagerly, with a smaller host-bound
    share, and its replayed kernels are priced with their sizes (the GEMMs' shapes, the same device time)."""
    predicted = {}
    for mode in ("graph", "eager"):
        r, out = emulate(tmp_path / mode, "--iterations", "0", script="cuda_graph_training.py", script_args=[mode])
        assert r.exit_code == 0, r.output
        p = runner.invoke(app, ["predict", str(out), "--durations", "roofline", "--json"])
        assert p.exit_code == 0, p.output
        predicted[mode] = json.loads(p.stdout)
        calls = Run(out).table("api_calls").to_pylist()
        replayed = [c for c in calls if c["args"] and "cuda_graph_replay" in c["args"]]
        assert bool(replayed) == (mode == "graph")
        issued = replayed or calls  # the graphs' warm-up steps ran eagerly before capture
        predicted[mode]["gemms"] = Counter((c["gemm_m"], c["gemm_n"], c["gemm_k"]) for c in issued if c["gemm_m"])
    graph, eager = predicted["graph"], predicted["eager"]
    assert graph["gemms"] == eager["gemms"] and eager["gemms"].total() == 8 * 23  # x needs no gradient
    assert graph["compute_ns"] >= 0.9 * eager["compute_ns"]  # the same work priced, not empty launches
    assert graph["iteration_ns"] < eager["iteration_ns"]
    assert graph["host_bound_ns"] / graph["iteration_ns"] < eager["host_bound_ns"] / eager["iteration_ns"]


def test_compiled_run_reports_the_peak_maya_predict_uses(tmp_path):
    """Inductor's compile workers inherit the stubs; they must not touch the rank's capture."""
    result = emulate_run([str(WORKLOADS / "compiled_mlp.py")], tmp_path / "run")
    assert result.status == "complete"
    peak = result.ranks[0].peak_bytes
    assert peak > 0
    assert peak == memory_peak(load(tmp_path / "run").ranks[0])[0]


def test_conversion_does_not_depend_on_chunk_sizes(tmp_path, monkeypatch):
    """The streamed conversion writes the same tables with chunks and parts of a few rows as in one."""
    monkeypatch.setattr(convert, "CHUNK_RECORDS", 7)
    monkeypatch.setattr(convert, "PART_ROWS", 50)
    monkeypatch.setenv("MAYA_KEEP_CAPTURE", "1")
    small = tmp_path / "small"
    assert emulate_run([str(WORKLOADS / "checkpointing.py")], small).status == "complete"
    assert len(list((small / "api_calls" / "rank=0").glob("part-*.parquet"))) >= 3
    raw = small / ".capture" / "rank0"
    again = tmp_path / "again"
    monkeypatch.setattr(convert, "CHUNK_RECORDS", 1 << 16)
    monkeypatch.setattr(convert, "PART_ROWS", 1 << 20)
    convert.write_rank(raw, RunWriter(again), 0)
    shutil.copy(small / "run.parquet", again / "run.parquet")
    for table in ("api_calls", "ops", "memory_events", "kernels"):
        chunked = read_table(small, table).sort_by(_order(table)).to_pylist()
        whole = read_table(again, table).sort_by(_order(table)).to_pylist()
        assert chunked == whole, table
    assert validate_run(small) == []


def _order(table: str) -> str:
    return {"api_calls": "seq", "ops": "op_id", "memory_events": "seq", "kernels": "kernel_id"}[table]


def test_jiterator_kernels_compile_with_nvrtc_and_are_recorded_by_name(tmp_path, monkeypatch):
    """torch compiles `special.airy_ai` and `special.bessel_j0` with NVRTC at first use: the programs compile
    at once and their launches carry the kernels' names; an NVRTC function not emulated fails loudly. The
    placeholder images stay out of torch's kernel cache."""
    (tmp_path / "cache" / "torch").mkdir(parents=True)  # torch makes only the last folder of its cache path
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("PYTORCH_KERNEL_CACHE_PATH", raising=False)
    r, out = emulate(tmp_path, script="jiterator_ops.py")
    assert r.exit_code == 0, r.output
    assert "jiterated (4096,)" in r.output
    assert "nvrtcGetPCHHeapSize returned 11" in r.output  # NVRTC_ERROR_INTERNAL_ERROR
    assert "unimplemented CUDA API nvrtcGetPCHHeapSize" in r.output
    run = Run(out)
    names = run.table("kernels").column("name").to_pylist()
    assert any(n.startswith("airy_ai_forward") for n in names) and any(n.startswith("bessel_j0") for n in names)
    apis = run.table("api_calls").column("api").to_pylist()
    assert apis.count("nvrtcCompileProgram") == 2 and apis.count("cuLaunchKernel") == 2
    cache = tmp_path / "cache" / "torch" / "kernels"
    assert not cache.exists() or not any(cache.iterdir())
