"""Build synthetic traces call by call, with measured durations (tests, benchmarks, examples).

    b = TraceBuilder(world_size=2)
    b.communicator("dp", [0, 1])
    for r in (0, 1):
        k = b.rank(r)
        k.kernel(10_000)
        k.allreduce("dp", 50_000)
        k.stream_sync()
    b.write("runs/toy")

Every call is written with `device_duration_ns` for its device work (replay it with
`MeasuredDurations`) and `duration_ns` = its host time, calls back to back on the host clock.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

from maya.core.hardware import DEFAULT_HARDWARE
from maya_trace_spec import RunWriter
from maya_trace_spec.vocabulary import NCCL_API_COLLECTIVES

KERNEL_NAME = "synthetic_kernel"


class RankBuilder:
    """The calls of one rank; `iteration` (when set) tags every call through one op per iteration, and `module` /
    `backward` (when set) through an op in that module's forward (`nn.Module: <module>`) or in the backward phase."""

    def __init__(self, rank: int, host_ns: int, represents: list[int] | None):
        self.rank = rank
        self.host_ns = host_ns
        self.represents = represents
        self.rows: list[dict] = []
        self.iteration: int | None = None
        self.module: str | None = None
        self.backward = False
        self.clock = 0
        self.comm_seq: dict[str, int] = {}

    def _call(self, api: str, domain: str = "runtime", stream: int = 0, host_ns: int | None = None, **fields) -> None:
        host = self.host_ns if host_ns is None else host_ns
        self.rows.append(
            {
                "seq": len(self.rows),
                "api": api,
                "domain": domain,
                "start_ns": self.clock,
                "duration_ns": host,
                "time_source": "measured",
                "stream_id": stream,
                "_iteration": self.iteration,
                "_scope": (self.module, self.backward) if self.module or self.backward else None,
                **fields,
            }
        )
        self.clock += host

    def kernel(self, duration_ns: int, stream: int = 0, **fields) -> None:
        self._call("cudaLaunchKernel", stream=stream, kernel_id=0, device_duration_ns=duration_ns, **fields)

    def gemm(self, m: int, n: int, k: int, duration_ns: int, stream: int = 0, dtype: str = "bf16") -> None:
        self._call(
            "cublasGemmEx",
            "cublas",
            stream,
            gemm_m=m,
            gemm_n=n,
            gemm_k=k,
            gemm_batch=1,
            gemm_dtype_a=dtype,
            gemm_dtype_b=dtype,
            gemm_dtype_c=dtype,
            gemm_compute_type="fp32",
            device_duration_ns=duration_ns,
        )

    def memcpy(self, nbytes: int, kind: str, duration_ns: int, stream: int = 0) -> None:
        self._call("cudaMemcpyAsync", stream=stream, bytes=nbytes, memcpy_kind=kind, device_duration_ns=duration_ns)

    def record(self, event: int, stream: int = 0) -> None:
        self._call("cudaEventRecord", stream=stream, event_id=event)

    def wait(self, stream: int, event: int) -> None:
        self._call("cudaStreamWaitEvent", stream=stream, event_id=event)

    def event_sync(self, event: int) -> None:
        self._call("cudaEventSynchronize", event_id=event)

    def stream_sync(self, stream: int = 0) -> None:
        self._call("cudaStreamSynchronize", stream=stream)

    def device_sync(self) -> None:
        self._call("cudaDeviceSynchronize")

    def host(self, api: str = "cudaGetDevice", host_ns: int | None = None) -> None:
        """A call with no device work (host time only)."""
        self._call(api, host_ns=host_ns)

    def collective(
        self, name: str, comm: str, duration_ns: int, stream: int = 0, nelems: int = 1 << 20, peer: int | None = None
    ) -> None:
        seq = self.comm_seq.get(comm, 0)
        self.comm_seq[comm] = seq + 1
        api = next(api for api, collective in NCCL_API_COLLECTIVES.items() if collective == name)
        self._call(
            api,
            "nccl",
            stream,
            comm_id=comm,
            collective_name=name,
            comm_seq=seq,
            in_msg_nelems=nelems,
            out_msg_nelems=nelems,
            comm_dtype="bf16",
            peer_rank=peer,
            device_duration_ns=duration_ns,
        )

    def allreduce(self, comm: str, duration_ns: int, stream: int = 0, nelems: int = 1 << 20) -> None:
        self.collective("allreduce", comm, duration_ns, stream, nelems)

    def send(self, comm: str, peer: int, duration_ns: int, stream: int = 0) -> None:
        """`peer`: the receiver's rank within the communicator."""
        self.collective("send", comm, duration_ns, stream, peer=peer)

    def recv(self, comm: str, peer: int, duration_ns: int, stream: int = 0) -> None:
        self.collective("recv", comm, duration_ns, stream, peer=peer)

    def group_start(self) -> None:
        self._call("ncclGroupStart", "nccl")

    def group_end(self) -> None:
        self._call("ncclGroupEnd", "nccl")


class TraceBuilder:
    def __init__(
        self, world_size: int, *, hardware: str = DEFAULT_HARDWARE, nproc_per_node: int | None = None, host_ns: int = 0
    ):
        self.world_size = world_size
        self.hardware = hardware
        self.nproc_per_node = nproc_per_node or world_size
        self.host_ns = host_ns
        self.ranks: dict[int, RankBuilder] = {}
        self.comms: dict[str, list[int]] = {}
        self.memory: dict[int, list[dict]] = {}

    def rank(self, rank: int, represents: list[int] | None = None) -> RankBuilder:
        if rank not in self.ranks:
            self.ranks[rank] = RankBuilder(rank, self.host_ns, represents)
        return self.ranks[rank]

    def communicator(self, comm_id: str, ranks: list[int]) -> None:
        """A communicator whose members are `ranks` (global ranks, by communicator rank)."""
        self.comms[comm_id] = list(ranks)

    def allocation(self, rank: int, allocated_bytes: int, kind: str = "alloc") -> None:
        events = self.memory.setdefault(rank, [])
        events.append(
            {
                "seq": len(events),
                "ts_ns": len(events),
                "kind": kind,
                "space": "device",
                "bytes": allocated_bytes,
                "allocated_bytes": allocated_bytes,
            }
        )

    def write(self, run_dir: str | Path, status: str = "complete", attrs: dict | None = None) -> Path:
        w = RunWriter(run_dir)
        w.write(
            "run",
            {
                "run_id": [uuid.uuid4().hex],
                "created_at_ns": [time.time_ns()],
                "source": ["synthetic"],
                "status": [status],
                "command": [json.dumps(["synthetic"])],
                "hardware": [self.hardware],
                "world_size": [self.world_size],
                "nnodes": [-(-self.world_size // self.nproc_per_node)],
                "nproc_per_node": [self.nproc_per_node],
                "attrs": [json.dumps(attrs) if attrs else None],
            },
        )
        for rank, b in sorted(self.ranks.items()):
            w.write(
                "devices",
                {
                    "local_rank": [rank % self.nproc_per_node],
                    "node": [rank // self.nproc_per_node],
                    "device_index": [rank % self.nproc_per_node],
                    "hardware": [self.hardware],
                    "represents": [b.represents],
                },
                rank=rank,
            )
            ops = _ops(b.rows)
            if ops:
                w.write("ops", ops, rank=rank)
            if b.rows:
                w.write("api_calls", _columns(b.rows), rank=rank)
            w.write("kernels", {"kernel_id": [0], "name": [KERNEL_NAME], "family": ["other"]}, rank=rank)
            members = [(c, ranks) for c, ranks in self.comms.items() if rank in ranks]
            if members:
                w.write(
                    "communicators",
                    {
                        "comm_id": [c for c, _ in members],
                        "comm_rank": [ranks.index(rank) for _, ranks in members],
                        "comm_size": [len(ranks) for _, ranks in members],
                        "ranks": [ranks for _, ranks in members],
                    },
                    rank=rank,
                )
            if rank in self.memory:
                w.write("memory_events", _columns(self.memory[rank]), rank=rank)
        return Path(run_dir)


def _ops(rows: list[dict]) -> dict[str, list] | None:
    """The ops table of calls tagged with an iteration (op `ProfilerStep#<i>`, id `i`) or a scope (`nn.Module:
    <module>` or `backward`, ids after the iterations'), each row given its op's id; None when none is tagged."""
    iterations = [row.pop("_iteration") for row in rows]
    scopes = [row.pop("_scope") for row in rows]
    steps = sorted({i for i in iterations if i is not None})
    keys = list(dict.fromkeys((i, s) for i, s in zip(iterations, scopes) if s is not None))
    if not steps and not keys:
        return None
    first = max(steps, default=-1) + 1
    ids = {key: first + n for n, key in enumerate(keys)}
    for row, i, scope in zip(rows, iterations, scopes):
        row["op_id"] = ids[(i, scope)] if scope is not None else i
    return {
        "op_id": steps + list(ids.values()),
        "name": [f"ProfilerStep#{i}" for i in steps]
        + [
            f"nn.Module: {module}" if module else "autograd::engine::evaluate_function: Backward"
            for _, (module, _) in keys
        ],
        "start_ns": steps + list(ids.values()),
        "module_path": [None] * len(steps) + [module for _, (module, _) in keys],
        "phase": ["other"] * len(steps) + ["backward" if back else "forward" for _, (_, back) in keys],
        "iteration": steps + [i for i, _ in keys],
    }


def _columns(rows: list[dict]) -> dict[str, list]:
    names = sorted({k for row in rows for k in row})
    return {k: [row.get(k) for row in rows] for k in names}


def one_f_one_b(
    k: RankBuilder,
    stage: int,
    stages: int,
    microbatches: int,
    forward,
    backward,
    *,
    comm: str = "pp",
    peers: tuple[int, int] | None = None,
    p2p_ns: int = 10,
) -> None:
    """One iteration of Megatron's non-interleaved 1F1B pipeline schedule on stage `stage`: `forward()`
    and `backward()` emit one micro-batch's calls; activations and gradients travel by send/recv
    exchanges grouped as `batch_isend_irecv` does. `peers`: the communicator ranks of the previous and
    next stage (default `stage - 1`, `stage + 1`)."""
    prev, nxt = peers or (stage - 1, stage + 1)

    def exchange(*ops) -> None:
        ops = [op for op in ops if op]
        if ops:
            k.group_start()
            for kind, peer in ops:
                (k.send if kind == "send" else k.recv)(comm, peer, p2p_ns)
            k.group_end()

    recv_f = ("recv", prev) if stage > 0 else None
    send_f = ("send", nxt) if stage < stages - 1 else None
    recv_b = ("recv", nxt) if stage < stages - 1 else None
    send_b = ("send", prev) if stage > 0 else None
    warmup = min(stages - stage - 1, microbatches)
    for _ in range(warmup):
        exchange(recv_f)
        forward()
        exchange(send_f)
    steady = microbatches - warmup
    if steady:
        exchange(recv_f)
    for i in range(steady):
        forward()
        exchange(send_f, recv_b)
        backward()
        exchange(send_b, recv_f if i < steady - 1 else None)
    for _ in range(warmup):
        exchange(recv_b)
        backward()
        exchange(send_b)


def gpt_3d(
    tp: int,
    pp: int,
    dp: int,
    *,
    layers: int = 32,
    microbatches: int = 8,
    iterations: int = 3,
    hidden: int = 8192,
    seq: int = 2048,
    dedup: bool = True,
    gpus_per_node: int = 8,
) -> TraceBuilder:
    """A GPT-like tensor x pipeline x data parallel training job (Megatron layout: rank =
    (stage x dp + replica) x tp + tp rank). Per layer and micro-batch, the forward launches 12 calls
    (4 GEMMs, 2 tensor-parallel all-reduces) and the backward 16 (8 GEMMs, 2 all-reduces); after the
    pipeline, gradients are reduce-scattered and parameters all-gathered over data parallel in 4
    buckets on a second stream, around the optimizer. `dedup`: capture one rank per stage,
    representing the stage's `dp x tp` ranks; else capture every rank."""
    world = tp * pp * dp
    b = TraceBuilder(world, nproc_per_node=min(gpus_per_node, world))

    def rank(s: int, d: int, t: int) -> int:
        return (s * dp + d) * tp + t

    h = hidden
    shapes = {
        "qkv": (3 * h // tp, seq, h),
        "proj": (h, seq, h // tp),
        "fc1": (4 * h // tp, seq, h),
        "fc2": (h, seq, 4 * h // tp),
    }
    elementwise_ns = seq * h * 2 * 3 // 3000  # read 2, write 1 bf16 tensors at ~3 TB/s

    def gemm_ns(m: int, n: int, k: int) -> int:
        return 2 * m * n * k // 600_000  # ~600 TFLOP/s

    captured = [rank(s, 0, 0) for s in range(pp)] if dedup else list(range(world))
    for r in captured:
        s, rest = divmod(r, dp * tp)
        d, t = divmod(rest, tp)
        tp_comm, dp_comm, pp_comm = f"tp{s}.{d}", f"dp{s}.{t}", f"pp{d}.{t}"
        b.communicator(tp_comm, [rank(s, d, x) for x in range(tp)])
        b.communicator(dp_comm, [rank(s, x, t) for x in range(dp)])
        b.communicator(pp_comm, [rank(x, d, t) for x in range(pp)])
        k = b.rank(r, represents=[rank(s, x, y) for x in range(dp) for y in range(tp)] if dedup else None)

        def gemm(name: str, backward: bool = False) -> None:
            m, n, kk = shapes[name]
            for dims in [(kk, n, m), (m, kk, n)] if backward else [(m, n, kk)]:
                k.gemm(*dims, gemm_ns(*dims))

        def allreduce() -> None:
            k.allreduce(tp_comm, 0, nelems=seq * h)  # priced by the provider (roofline)

        def forward() -> None:
            for _ in range(layers // pp):
                k.kernel(elementwise_ns)
                gemm("qkv")
                k.kernel(4 * elementwise_ns)
                gemm("proj")
                allreduce()
                k.kernel(elementwise_ns)
                k.kernel(elementwise_ns)
                gemm("fc1")
                k.kernel(2 * elementwise_ns)
                gemm("fc2")
                allreduce()
                k.kernel(elementwise_ns)

        def backward() -> None:
            for _ in range(layers // pp):
                k.kernel(elementwise_ns)
                gemm("fc2", True)
                k.kernel(2 * elementwise_ns)
                gemm("fc1", True)
                allreduce()
                k.kernel(elementwise_ns)
                gemm("proj", True)
                k.kernel(8 * elementwise_ns)
                gemm("qkv", True)
                allreduce()
                k.kernel(elementwise_ns)

        params = 12 * h * h * layers // pp // tp
        for it in range(iterations):
            k.iteration = it
            one_f_one_b(k, s, pp, microbatches, forward, backward, comm=pp_comm)
            for bucket in range(4):  # gradients: reduce-scatter on the data-parallel stream
                k.record(2 * bucket)
                k.wait(1, 2 * bucket)
                k.collective("reducescatter", dp_comm, 0, stream=1, nelems=params // 4)
            k.record(100, stream=1)
            k.wait(0, 100)
            for _ in range(6):
                k.kernel(params * 16 // 3000 // 6)  # fused AdamW over the shard
            for bucket in range(4):
                k.record(2 * bucket + 1)
                k.wait(1, 2 * bucket + 1)
                k.collective("allgather", dp_comm, 0, stream=1, nelems=params // 4)
            k.stream_sync(1)
            k.memcpy(4, "DtoH", 2_000)  # loss.item()
    return b
