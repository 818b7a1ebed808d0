"""`maya emulate`: unmodified scripts on virtual GPUs; what the trace must say about them."""

import json
import shutil
import subprocess
import time

import pyarrow.compute as pc
import pytest
from paths import WORKLOADS
from typer.testing import CliRunner

from maya.cli import app
from maya.core.hardware import get as get_hardware
from maya_trace_spec import Run
from maya_trace_spec.validation import validate_run

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

runner = CliRunner()


def emulate(tmp_path, *args, script, script_args=()):
    out = tmp_path / "run"
    r = runner.invoke(
        app, ["emulate", "--out", str(out), *args, "--", "python", str(WORKLOADS / script), *map(str, script_args)]
    )
    return r, out


def test_linear_bf16_gemms_match_the_layer(tmp_path):
    """Linear(4096 -> 11008) in bf16 autocast: forward, input-grad and weight-grad GEMMs, cuBLAS
    column-major: forward m=out_features, n=tokens, k=in_features."""
    r, out = emulate(tmp_path, script="linear_bf16.py", script_args=["--tokens", 2048])
    assert r.exit_code == 0, r.output
    assert validate_run(out) == []
    calls = Run(out).table("api_calls")
    gemms = (
        calls.filter(pc.is_valid(calls.column("gemm_m")))
        .select(["gemm_m", "gemm_n", "gemm_k", "gemm_trans_a", "gemm_trans_b", "gemm_dtype_a"])
        .to_pylist()
    )
    assert [tuple(g.values()) for g in gemms] == [
        (11008, 2048, 4096, True, False, "bf16"),  # y = x W^T
        (4096, 11008, 2048, False, True, "bf16"),  # dW = dy^T x
        (4096, 2048, 11008, False, False, "bf16"),  # dx = dy W
    ]
    ops = Run(out).table("ops")
    assert "aten::linear" in ops.column("name").to_pylist()
    # every call is attributed to the framework op that made it
    assert calls.column("op_id").null_count == 0


def test_dot_products_are_recorded_as_one_by_one_gemms(tmp_path):
    """cuBLAS's dot products (fp32, fp64, and bf16 through `cublasDotEx`) are GEMMs of one row by one column over the
    vectors' length; torch asks for the result on the device, and of vectors the host knows (ones) the host knows it."""
    r, out = emulate(tmp_path, script="dot_products.py")
    assert r.exit_code == 0, r.output
    calls = Run(out).table("api_calls")
    dots = calls.filter(pc.is_valid(calls.column("gemm_m"))).select(
        ["api", "gemm_m", "gemm_n", "gemm_k", "gemm_dtype_a"]
    )
    assert [tuple(d.values()) for d in dots.to_pylist()] == [
        ("cublasSdot_v2", 1, 1, 1000, "fp32"),
        ("cublasDdot_v2", 1, 1, 1000, "fp64"),
        ("cublasDotEx", 1, 1, 1000, "bf16"),
    ]
    assert "torch.float32 1000.0" in r.output and "torch.bfloat16 1000.0" in r.output


def test_run_metadata_and_virtual_device(tmp_path):
    r, out = emulate(tmp_path, "--hardware", "a100-sxm-80gb", script="allocate.py", script_args=[4096])
    assert r.exit_code == 0, r.output
    run = Run(out)
    assert run.info["source"] == "emulator" and run.info["status"] == "complete"
    assert run.info["hardware"] == "a100-sxm-80gb" and run.info["world_size"] == 1
    device = run.table("devices").to_pylist()[0]
    hw = get_hardware("a100-sxm-80gb")
    assert (device["device_name"], device["sm_major"], device["sm_count"], device["memory_bytes"]) == (
        hw.device_name,
        8,
        108,
        hw.memory_bytes,
    )
    assert json.loads(run.info["command"])[-2:] == [str(WORKLOADS / "allocate.py"), "4096"]


def test_a_part_described_in_a_file_is_emulated_and_predicted(tmp_path):
    """An H100 with 96 GB of HBM2e at 500 W, described without editing Maya: the virtual device reports its
    memory, the trace names it, and a prediction re-reads the same file."""
    part = tmp_path / "h100-96gb.yaml"
    part.write_text(
        "name: h100-96gb-hbm2e\nbased_on: h100-sxm\nmemory_gb: 96\nmemory_bandwidth_gbs: 2400\ntdp_w: 500\n"
    )
    r, out = emulate(tmp_path, "--hardware", part, script="linear_bf16.py", script_args=["--tokens", 64])
    assert r.exit_code == 0, r.output
    run = Run(out)
    device = run.table("devices").to_pylist()[0]
    assert run.info["hardware"] == "h100-96gb-hbm2e" and device["memory_bytes"] == 96_000_000_000
    predicted = runner.invoke(app, ["predict", str(out), "--hardware", str(part), "--durations", "roofline", "--json"])
    assert predicted.exit_code == 0, predicted.output
    assert json.loads(predicted.stdout)["hardware"] == "h100-96gb-hbm2e"


def test_peak_memory_is_what_the_caching_allocator_reserved(tmp_path):
    sizes = [300 << 20, 1 << 30, 5 << 20]
    r, out = emulate(tmp_path, script="allocate.py", script_args=sizes)
    assert r.exit_code == 0, r.output
    log = (out / "logs" / "rank0.txt").read_text()
    assert log in r.output  # the script's output is shown and kept
    reserved = int(next(line.split()[-1] for line in log.splitlines() if line.startswith("max_memory_reserved")))
    events = Run(out).table("memory_events")
    peak = max(events.column("allocated_bytes").to_pylist())
    assert abs(peak - reserved) <= 0.01 * reserved


@pytest.mark.parametrize("allocator", ["default", "expandable"])
def test_the_prediction_tells_allocated_from_held_memory(tmp_path, allocator):
    """A large tensor that fits none of the freed blocks leaves the allocator holding 180 MiB while tensors never
    take more than 140 MiB at once (with expandable segments too: a block is one contiguous range): the
    prediction's peak allocated is the script's `max_memory_allocated()`, its peak memory what the allocator
    held (`max_memory_reserved()`), as a GPU's would be."""
    script_saw, p = _what_the_script_saw_and_predicted(tmp_path, "cached_blocks.py", allocator)
    assert script_saw["max_memory_allocated"] < 141 << 20 < 180 << 20 <= script_saw["max_memory_reserved"]
    assert p["peak_allocated_bytes"] == script_saw["max_memory_allocated"]
    assert p["peak_memory_bytes"] == script_saw["max_memory_reserved"]


@pytest.mark.parametrize("reset", ["cuda", "accelerator", "legacy"])
def test_the_peak_allocated_outlives_the_scripts_resets(tmp_path, reset):
    """A script that resets the peak statistics after step 0 (torchtune logs and resets them each step; by
    `torch.cuda.reset_peak_memory_stats`, `torch.accelerator.reset_peak_memory_stats` or the legacy
    `reset_max_memory_allocated`) reads the reset peak, as on a GPU; the prediction's peak allocated is the run's,
    before the reset (it was the last step's)."""
    script_saw, p = _what_the_script_saw_and_predicted(tmp_path, "peak_stats_reset.py", reset)
    # after the reset: what stays allocated (cuBLAS's 32 MiB workspace, the model) and the small steps
    assert script_saw["after_reset"] < 40 << 20 < 100 << 20 <= script_saw["before_reset"]
    assert p["peak_allocated_bytes"] == script_saw["before_reset"]


def _what_the_script_saw_and_predicted(tmp_path, script: str, argument: str) -> tuple[dict, dict]:
    """A one-rank workload that prints its allocator's figures as a JSON line: that line, and `maya predict --json`
    of its run (roofline durations)."""
    r, out = emulate(tmp_path, script=script, script_args=[argument])
    assert r.exit_code == 0, r.output
    log = (out / "logs" / "rank0.txt").read_text()
    script_saw = json.loads(next(line for line in log.splitlines() if line.startswith("{")))
    predicted = runner.invoke(app, ["predict", str(out), "--durations", "roofline", "--json"])
    assert predicted.exit_code == 0, predicted.output
    return script_saw, json.loads(predicted.stdout)


PLUGGABLE_ALLOCATOR_C = """#include <stdlib.h>
#include <sys/types.h>
void* my_malloc(ssize_t size, int device, void* stream){ return malloc(size ? size : 1); }
void my_free(void* ptr, ssize_t size, int device, void* stream){ free(ptr); }
"""


def test_a_script_with_a_pluggable_allocator_completes_without_allocator_peaks(tmp_path):
    """`torch.cuda.memory_stats` raises under a `CUDAPluggableAllocator`: the allocator's peaks are best effort, so
    the completed script is recorded as ok with its calls (not failed with none) and the prediction falls back to
    the memory events' peak, as for captures that predate the peaks."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    (tmp_path / "alloc.c").write_text(PLUGGABLE_ALLOCATOR_C)
    subprocess.run([cc, "-shared", "-fPIC", "-o", tmp_path / "alloc.so", tmp_path / "alloc.c"], check=True)
    r, out = emulate(tmp_path, script="pluggable_allocator.py", script_args=[tmp_path / "alloc.so"])
    assert r.exit_code == 0, r.output
    assert "script done" in (out / "logs" / "rank0.txt").read_text()
    run = Run(out)
    assert run.info["status"] == "complete"
    assert not json.loads(run.info["attrs"] or "{}").get("allocator_peaks")
    assert run.table("api_calls").num_rows > 0
    predicted = runner.invoke(app, ["predict", str(out), "--durations", "roofline", "--json"])
    assert predicted.exit_code == 0, predicted.output
    assert json.loads(predicted.stdout)["peak_allocated_bytes"] is None


def test_oom_exactly_at_capacity(tmp_path):
    hw = get_hardware("l4")
    fits = hw.memory_bytes - (64 << 20)
    r, out = emulate(tmp_path / "fits", "--hardware", "l4", script="allocate.py", script_args=[fits])
    assert r.exit_code == 0, r.output
    r, out = emulate(tmp_path / "over", "--hardware", "l4", script="allocate.py", script_args=[hw.memory_bytes + 1])
    assert r.exit_code == 3, r.output
    assert "OutOfMemoryError" in r.stderr
    described = " ".join(r.stderr.split())  # as `maya predict` describes it (simulator/oom.py)
    assert "rank 0 ran out of device memory" in described and "GiB in use" in described, r.stderr
    assert Run(out).info["status"] == "oom"
    ooms = Run(out).table("memory_events").filter(pc.equal(pc.field("kind"), "oom")).to_pylist()
    assert ooms and ooms[0]["bytes"] >= hw.memory_bytes


def test_unimplemented_api_fails_loudly_and_is_counted(tmp_path):
    r, out = emulate(tmp_path, script="svd.py")
    assert r.exit_code == 1
    assert "cusolverDnCreate" in r.stdout + r.stderr
    calls = Run(out).table("api_calls")
    assert "cusolverDnCreate" in calls.column("api").to_pylist()
    assert Run(out).info["status"] == "failed"


def test_ddp_two_isolated_ranks(tmp_path):
    r, out = emulate(tmp_path, "--nproc-per-node", "2", "--no-dedup", script="ddp_mlp.py")
    assert r.exit_code == 0, r.output
    assert validate_run(out) == []
    run = Run(out)
    assert run.ranks == [0, 1]
    calls = run.table("api_calls")
    allreduce = calls.filter(pc.equal(pc.field("collective_name"), "allreduce"))
    params = 1024 * 4096 + 4096 + 4096 * 1024 + 1024
    per_rank = {
        rank: sum(
            n
            for rk, n in zip(allreduce.column("rank").to_pylist(), allreduce.column("in_msg_nelems").to_pylist())
            if rk == rank
        )
        for rank in (0, 1)
    }
    # three steps, every gradient reduced once per step (DDP buckets), on the default process group
    assert per_rank == {0: 3 * params, 1: 3 * params}
    assert set(allreduce.column("comm_id").to_pylist()) == {"pg:0"}
    comms = run.table("communicators").to_pylist()
    assert {(c["rank"], c["comm_id"], c["comm_rank"], c["comm_size"]) for c in comms} == {
        (0, "pg:0", 0, 2),
        (1, "pg:0", 1, 2),
    }


def test_a_torchrun_command_sets_the_job_shape(tmp_path):
    """The launch as a README writes it (nanoGPT: `torchrun --standalone --nproc_per_node=4 train.py`) runs
    without rewriting it for maya: torchrun's --nproc-per-node is the job's GPUs."""
    out = tmp_path / "run"
    r = runner.invoke(
        app,
        [
            "emulate",
            "--out",
            str(out),
            "--iterations",
            "2",
            "--",
            "torchrun",
            "--standalone",
            "--nproc_per_node=2",
            str(WORKLOADS / "ddp_mlp.py"),
        ],
    )
    assert r.exit_code == 0, r.output
    run = Run(out)
    assert run.info["world_size"] == 2
    assert {c["comm_size"] for c in run.table("communicators").to_pylist()} == {2}


@pytest.mark.parametrize("dedup", ["--dedup", "--no-dedup"])
def test_ranks_checking_agreement_receive_what_the_source_broadcast(tmp_path, dedup):
    """Rank 0 broadcasts a value the other ranks compare with their own (as DeepSpeed ZeRO-3 does), their
    buffers holding -1 until it arrives: the source's bytes reach them through the mailbox, whether the ranks
    run together or rank 0 alone first (dedup), and every rank passes the check."""
    r, out = emulate(tmp_path, "--nproc-per-node", "4", dedup, script="rank_agreement.py")
    assert r.exit_code == 0, r.output
    assert Run(out).info["status"] == "complete"


def test_a_rank_failing_where_others_complete_gets_its_whole_message_and_a_way_out(tmp_path):
    """A rank that fails alone (here it raises on purpose) reports its exception, whole, and the note that
    isolated ranks receive their own data where a peer's was sent, with the way out: capture rank 0."""
    r, out = emulate(
        tmp_path, "--nproc-per-node", "2", "--no-dedup", script="rank_agreement.py", script_args=["--fail-rank", "1"]
    )
    assert r.exit_code == 1
    assert "rank 1: RuntimeError: rank 1 fails: on purpose" in " ".join(r.stderr.split())
    assert "--ranks 0" in r.stderr


def test_ranks_that_decide_apart_deadlock_the_replay_and_one_rank_captured_predicts(tmp_path):
    """Rank 1 skips an all-reduce on a value it read (its captures complete): `maya predict` says the captures made
    different collectives and that capturing one rank was tried; with `--ranks 0` every rank replays rank 0's calls
    and the job predicts (the advice the message gives is this test)."""
    r, out = emulate(tmp_path, "--nproc-per-node", "2", "--no-dedup", script="ranks_decide_apart.py")
    assert r.exit_code == 0, r.output
    p = runner.invoke(app, ["predict", str(out), "--durations", "roofline"])
    assert p.exit_code == 1
    message = " ".join(p.stderr.split())
    assert "rank(s) [1] ended without it, their captures complete: the ranks' captures made different" in message
    one, out = emulate(tmp_path / "one", "--nproc-per-node", "2", "--ranks", "0", script="ranks_decide_apart.py")
    assert one.exit_code == 0, one.output
    p = runner.invoke(app, ["predict", str(out), "--durations", "roofline", "--json"])
    assert p.exit_code == 0, p.output
    assert json.loads(p.stdout)["world_size"] == 2


def test_capture_a_subset_of_a_large_world(tmp_path):
    r, out = emulate(tmp_path, "--world-size", "4096", "--nnodes", "512", "--ranks", "4095", script="ddp_mlp.py")
    assert r.exit_code == 0, r.output
    run = Run(out)
    assert run.ranks == [4095] and run.info["world_size"] == 4096
    device = run.table("devices").to_pylist()[0]
    assert (device["local_rank"], device["node"]) == (7, 511)
    assert run.table("communicators").to_pylist()[0]["comm_rank"] == 4095


@pytest.mark.parametrize(
    "args, message",
    [
        (["--hardware", "h300"], "unknown hardware 'h300'"),
        (["--hardware", "absent.yaml"], "cannot read the hardware file"),
        (["--ranks", "3"], "outside the world of 1"),
        (["--ranks", "x-1"], "is not a rank or a range"),
        (["--nproc-per-node", "2", "--world-size", "4"], "not both"),
    ],
)
def test_bad_arguments(tmp_path, args, message):
    r, out = emulate(tmp_path, *args, script="allocate.py")
    assert r.exit_code != 0 and message in r.stderr
    assert not out.exists()


@pytest.mark.parametrize("causal", [True, False])
def test_sdpa_uses_the_backend_an_h100_picks(tmp_path, causal):
    """bf16 SDPA on sm_90: torch's own selection picks cuDNN attention; its graphs are recorded with
    their shapes (batch, heads, sequence, head dim) and masking."""
    r, out = emulate(tmp_path, script="sdpa_bf16.py", script_args=["--causal"] if causal else [])
    assert r.exit_code == 0, r.output
    run = Run(out)
    calls = run.table("api_calls").filter(pc.equal(pc.field("domain"), "cudnn")).to_pylist()
    kernels = {k["kernel_id"]: k for k in run.table("kernels").to_pylist()}
    assert [kernels[c["kernel_id"]]["name"] for c in calls] == ["cudnn_sdpa_fwd", "cudnn_sdpa_bwd"]
    assert {kernels[c["kernel_id"]]["family"] for c in calls} == {"attention"}
    for call, backward in zip(calls, (False, True)):
        assert json.loads(call["args"])["attention"] == {
            "batch": 2,
            "heads": 8,
            "seq_q": 256,
            "seq_kv": 256,
            "head_dim": 64,
            "causal": causal,
            "backward": backward,
            "dtype": "bf16",
            "kv_heads": 8,
        }


@pytest.mark.parametrize(
    "script, ranks, expect",
    [
        ("fp16_grad_scaler.py", 1, {"gemm_dtype": "fp16"}),
        ("checkpointing.py", 1, {"recompute": True}),
        ("compiled_mlp.py", 1, {"library": "triton"}),
        ("fsdp2_mlp.py", 2, {"collectives": {"allgather", "reducescatter"}}),
        ("tensor_parallel_mlp.py", 2, {"collectives": {"allreduce"}}),
        ("fsdp_tp_mesh.py", 4, {"collectives": {"allgather", "reducescatter", "allreduce"}}),
    ],
)
def test_support_matrix(tmp_path, script, ranks, expect):
    """Ordinary training scripts run unchanged, and their trace shows what makes them what they are."""
    r, out = emulate(tmp_path, "--nproc-per-node", str(ranks), script=script)
    assert r.exit_code == 0, r.output
    assert validate_run(out) == []
    run = Run(out)
    calls = run.table("api_calls")
    for group in run.table("communicators").to_pylist():  # sub-groups know their real members
        assert group["comm_size"] == len(group["ranks"]) <= ranks
    if "gemm_dtype" in expect:
        assert set(calls.column("gemm_dtype_a").drop_null().to_pylist()) == {expect["gemm_dtype"]}
    if "recompute" in expect:  # the checkpointed forward runs again inside backward
        ops = run.table("ops")
        backward_addmm = ops.filter((pc.field("phase") == "backward") & (pc.field("name") == "aten::addmm"))
        assert backward_addmm.num_rows >= 8  # 4 blocks x 2 Linear layers per step
    if "library" in expect:
        libraries = set(run.table("kernels").column("library").to_pylist())
        assert expect["library"] in libraries
        assert "global hooks" not in r.output  # Maya's module hooks make torch warn at compiled calls: filtered
    if "collectives" in expect:
        names = set(calls.column("collective_name").drop_null().to_pylist())
        assert expect["collectives"] <= names


def test_hugging_face_llama_from_config(tmp_path):
    r, out = emulate(tmp_path, script="hf_llama.py")
    assert r.exit_code == 0, r.output
    run = Run(out)
    modules = set(run.table("ops").column("module_path").drop_null().to_pylist())
    assert "LlamaForCausalLM.model.layers.1.self_attn.k_proj" in modules
    calls = run.table("api_calls")
    gemms = calls.filter(pc.is_valid(calls.column("gemm_m")))
    # GQA: 2 KV heads of 64 -> the k projection is 512 -> 128, over 2 x 256 tokens
    assert (128, 512, 512) in {(g["gemm_m"], g["gemm_n"], g["gemm_k"]) for g in gemms.to_pylist()}


@pytest.mark.parametrize("tp, pp", [(2, 1), (1, 2)])
def test_megatron_core_gpt(tmp_path, tp, pp):
    r, out = emulate(
        tmp_path, "--nproc-per-node", "2", "--no-dedup", script="megatron_gpt.py", script_args=["--tp", tp, "--pp", pp]
    )
    assert r.exit_code == 0, r.output
    calls = Run(out).table("api_calls").to_pylist()
    by_rank = {
        rank: [c["collective_name"] for c in calls if c["rank"] == rank and c["collective_name"]] for rank in (0, 1)
    }
    if pp == 2:  # activations forward, gradients back: every send has its receive on the other stage
        assert by_rank[0].count("send") == by_rank[1].count("recv") > 0
        assert by_rank[1].count("send") == by_rank[0].count("recv") > 0
    else:  # tensor-parallel layers all-reduce their partial results on both ranks alike
        assert by_rank[0].count("allreduce") == by_rank[1].count("allreduce") > 0


def _represents(out):
    return {d["rank"]: d["represents"] for d in Run(out).table("devices").to_pylist()}


def test_dedup_data_parallel_ranks_are_captured_once(tmp_path):
    r, out = emulate(tmp_path, "--nproc-per-node", "8", script="ddp_mlp.py")
    assert r.exit_code == 0, r.output
    assert _represents(out) == {0: list(range(8))}
    assert json.loads(Run(out).info["attrs"])["captured_ranks"] == [0]


def test_a_last_rank_started_ahead_that_no_capture_needs_is_stopped(tmp_path):
    """The last rank starts beside rank 0 (usually the check of the last class of equivalent ranks); here the one
    class holds tensor-parallel pairs, so no check is made, and the last rank, asleep for ten minutes, is stopped once
    rank 0's capture is done: the run completes with rank 0 standing for all four."""
    started = time.monotonic()
    out = tmp_path / "run"
    script = str(WORKLOADS / "tp_pairs_last_sleeps.py")
    r = runner.invoke(app, ["emulate", "--out", str(out), "--", "torchrun", "--nproc_per_node", "4", script, "600"])
    assert r.exit_code == 0, r.output
    assert time.monotonic() - started < 300  # not the sleeping rank's ten minutes
    assert _represents(out) == {0: [0, 1, 2, 3]}
    assert sorted(p.name for p in (out / "logs").iterdir()) == ["rank0.txt"]  # the stopped rank leaves nothing


def test_dedup_one_capture_per_pipeline_stage(tmp_path):
    r, out = emulate(tmp_path, "--nproc-per-node", "4", script="megatron_gpt.py", script_args=["--tp", 2, "--pp", 2])
    assert r.exit_code == 0, r.output
    assert _represents(out) == {0: [0, 1], 2: [2, 3]}


def test_dedup_finds_the_pipeline_group_when_one_direction_goes_over_the_world_group(tmp_path):
    """Megatron-LM's two-stage pipelines send gradients back over the world group: the stages are still the
    pipeline group's (one capture each, not every rank), and the deduplicated run predicts what every rank's
    capture predicts."""
    predicted = {}
    for dedup in ("--dedup", "--no-dedup"):
        r, out = emulate(tmp_path / dedup, "--nproc-per-node", "4", dedup, script="world_group_p2p.py")
        assert r.exit_code == 0, r.output
        p = runner.invoke(app, ["predict", str(out), "--durations", "roofline", "--json"])
        assert p.exit_code == 0, p.output
        predicted[dedup] = json.loads(p.output)
    assert _represents(tmp_path / "--dedup" / "run") == {0: [0, 1], 2: [2, 3]}
    assert predicted["--dedup"]["iteration_ms"] == pytest.approx(predicted["--no-dedup"]["iteration_ms"], rel=1e-6)


def test_dedup_splits_a_rank_that_behaves_differently(tmp_path):
    """Rank 0 logs (a host sync the others lack): the check capture differs, so rank 0 stands for
    itself and the checked rank for the others."""
    r, out = emulate(tmp_path, "--nproc-per-node", "4", script="rank0_logging.py")
    assert r.exit_code == 0, r.output
    assert _represents(out) == {0: [0], 3: [3, 1, 2]}  # a capture comes first in what it stands for
    assert sorted(p.name for p in (out / "logs").iterdir()) == ["rank0.txt", "rank3.txt"]
    assert runner.invoke(app, ["predict", str(out), "--json"]).exit_code == 0


def test_dedup_keeps_rank_0_for_its_class_when_the_class_shares_tensor_parallel_groups(tmp_path):
    """DP x TP with rank-0 logging: cutting rank 0 out of its class would leave a class that cannot be
    replayed around rank 0's tensor-parallel peers, so rank 0 stands for its class, logging included. The
    parameters' scatter from each TP group's first rank (`parallelize_module`) is no pipeline, so the job is one
    class (it was one per TP position), replayed from rank 0's program, scatter root and receivers alike."""
    r, out = emulate(tmp_path, "--nproc-per-node", "8", script="tp_rank0_logging.py")
    assert r.exit_code == 0, r.output
    assert _represents(out) == {0: list(range(8))}
    # a TP group lies inside the class, so no check capture runs (`dedup.checked`): only the representative has logs
    assert sorted(p.name for p in (out / "logs").iterdir()) == ["rank0.txt"]
    p = runner.invoke(app, ["predict", str(out), "--json"])
    assert p.exit_code == 0, p.output


def test_one_rank_of_a_4096_rank_megatron_job(tmp_path):
    """TP8 x PP8 x DP64: rank 9 alone, its tensor- and pipeline-parallel groups as Megatron lays them out."""
    r, out = emulate(
        tmp_path,
        "--world-size",
        "4096",
        "--nnodes",
        "512",
        "--ranks",
        "9",
        script="megatron_gpt.py",
        script_args=["--tp", 8, "--pp", 8],
    )
    assert r.exit_code == 0, r.output
    groups = sorted(tuple(g["ranks"]) for g in Run(out).table("communicators").to_pylist())
    assert groups == [tuple(range(8, 16)), tuple(range(9, 4096, 512))]


def test_torch_pipelining_stages_exchange_their_metadata(tmp_path):
    """torch.distributed.pipelining (1F1B): each stage learns its neighbours' shapes from pickled
    objects; rank 0 is captured first and waits, so the launcher starts rank 1 on demand."""
    r, out = emulate(tmp_path, "--nproc-per-node", "2", script="pipeline_gpt.py")
    assert r.exit_code == 0, r.output
    assert validate_run(out) == []
    assert _represents(out) == {0: [0], 1: [1]}
    calls = Run(out).table("api_calls").filter(pc.field("collective_name").isin(["send", "recv"]))
    counts = {}
    for row in calls.to_pylist():
        key = (row["rank"], row["collective_name"], row["peer_rank"])
        counts[key] = counts.get(key, 0) + 1
    # 2 steps x 4 micro-batches: activations forward, gradients backward, every send matched by a recv
    assert counts[(0, "send", 1)] == counts[(1, "recv", 0)] >= 8
    assert counts[(1, "send", 0)] == counts[(0, "recv", 1)] >= 8


def test_a_pipeline_stopped_by_iterations_predicts(tmp_path):
    """Stopped by `--iterations 2`, the last stage has already posted the next step's first receive (before any
    module call), which the first stage, stopped at its first module call, never sends: the simulator leaves
    out what the stopped iteration had started, and the stages' exchanges match."""
    r, out = emulate(
        tmp_path, "--nproc-per-node", "2", "--iterations", "2", script="pipeline_gpt.py", script_args=["--steps", "6"]
    )
    assert r.exit_code == 0, r.output
    calls = Run(out).table("api_calls").filter(pc.field("collective_name").isin(["send", "recv"])).to_pylist()

    def count(rank, name):
        return sum(1 for c in calls if (c["rank"], c["collective_name"]) == (rank, name))

    assert count(1, "recv") > count(0, "send")  # the dangling receive is in the trace
    p = runner.invoke(app, ["predict", str(out), "--durations", "roofline", "--json"])
    assert p.exit_code == 0, p.output
    prediction = json.loads(p.stdout)
    assert prediction["iterations"] == 2 and prediction["iteration_ns"] > 0


def test_object_collectives_and_gloo_groups(tmp_path):
    """Objects a root sends arrive as sent (through the mailbox); Gloo groups complete without peers, their
    monitored barriers too (Lightning Fabric's `rank_zero_first`, as `litgpt pretrain` on 4 GPUs reaches it)."""
    r, out = emulate(tmp_path, "--nproc-per-node", "2", "--no-dedup", script="object_collectives.py")
    assert r.exit_code == 0, r.output
    log = (out / "logs" / "rank1.txt").read_text()
    assert "broadcast {'lr': 0.1, 'from': 0}" in log
    assert "all_gather_object 2" in log and "scatter shard1" in log and "monitored_barrier" in log and "done" in log
    calls = Run(out).table("api_calls")
    assert calls.filter(pc.field("collective_name") == "allreduce").num_rows == 2  # one per rank; Gloo's is on the CPU


def test_convolutions_are_recorded_as_their_implicit_gemms(tmp_path):
    """cuDNN graph convolutions (forward, data and filter gradients) carry the implicit GEMM of each
    group: conv1 3->64 3x3 on 8x32x32, conv2 64->128 3x3 stride 2 in 2 groups (output 16x16)."""
    r, out = emulate(tmp_path, script="conv_net.py")
    assert r.exit_code == 0, r.output
    calls = Run(out).table("api_calls").filter(pc.field("domain") == "cudnn")
    shapes = {(c["gemm_m"], c["gemm_n"], c["gemm_k"], c["gemm_batch"], c["gemm_dtype_a"]) for c in calls.to_pylist()}
    assert shapes == {
        (8 * 32 * 32, 64, 3 * 9, 1, "bf16"),  # conv1 forward
        (64, 3 * 9, 8 * 32 * 32, 1, "bf16"),  # conv1 filter gradient (the input needs none)
        (8 * 16 * 16, 64, 32 * 9, 2, "bf16"),  # conv2 forward, per group: 64 outputs from 32 x 3 x 3
        (8 * 32 * 32, 32, 64 * 9, 2, "bf16"),  # conv2 data gradient
        (64, 32 * 9, 8 * 16 * 16, 2, "bf16"),  # conv2 filter gradient
    }


def test_cuda_graphs_replay_what_was_captured(tmp_path):
    """A captured forward (two cuBLASLt GEMMs and a ReLU) is not issued at capture; each of the
    three replays issues it on the launching stream, with the captured ops' context, as device work of no host
    call (the launch is the host's only call)."""
    r, out = emulate(tmp_path, script="cuda_graph.py")
    assert r.exit_code == 0, r.output
    calls = Run(out).table("api_calls").to_pylist()
    apis = [c["api"] for c in calls]
    assert apis.count("cudaStreamBeginCapture") == apis.count("cudaStreamEndCapture") == 1
    assert apis.count("cudaGraphLaunch") == 3
    captured = apis.index("cudaStreamBeginCapture"), apis.index("cudaStreamEndCapture")
    assert captured[1] == captured[0] + 1  # nothing issued while capturing
    replays = [c for c in calls if c["args"] and json.loads(c["args"]).get("cuda_graph_replay")]
    assert len(replays) == 3 * 3
    assert {c["domain"] for c in replays} == {"device"}  # issued by the launch, not by calls of their own
    launches = [c for c in calls if c["api"] == "cudaGraphLaunch"]
    assert {c["stream_id"] for c in replays} == {launches[0]["stream_id"]}
    assert sum(c["gemm_m"] is not None for c in replays) == 3 * 2
    assert len({c["op_id"] for c in replays}) == 3  # the ops that launched them during capture
    # every host call carries its thread's CPU clock; of a launch's replayed rows, only the last (written last)
    by_seq = sorted(calls, key=lambda c: c["seq"])
    assert all(c["cpu_start_ns"] is not None and c["cpu_duration_ns"] >= 0 for c in calls if c["domain"] != "device")
    for launch in launches:
        rows = [c for c in by_seq if c["seq"] > launch["seq"]][:3]
        assert [c["cpu_start_ns"] is not None for c in rows] == [False, False, True]
        assert rows[-1]["cpu_start_ns"] >= launch["cpu_start_ns"] + launch["cpu_duration_ns"]


def test_dataloader_worker_processes_leave_the_trace_alone(tmp_path):
    """Forked DataLoader workers inherit the recorders; they must neither record nor duplicate the
    parent's buffers."""
    r, out = emulate(tmp_path, "--iterations", "0", script="dataloader_workers.py")
    assert r.exit_code == 0, r.output
    assert validate_run(out) == []
    ops = Run(out).table("ops")
    assert len(set(ops.column("op_id").to_pylist())) == ops.num_rows
    assert max(ops.column("iteration").to_pylist()) == 21  # 21 optimizer steps
