"""The single source of the trace schema: every table and column, documented once.

The pyarrow schemas (`schema.py`), the pandera validation (`validation.py`) and the
generated `SPEC.md` (`spec_doc.py`) are all derived from the `TABLES` defined here.
This module imports only pyarrow, so GPU hosts can write traces without extra packages.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

SPEC_VERSION = "1.7.0"
"""Semantic version of the schema. Minor versions add nullable columns, allowed values and `args` entries
(1.1: phase `eval`, domain `nvml`; 1.2: `args.triton`, a Triton launch's arguments; 1.3: run status
`interrupted`; 1.4: `args.triton.name`, Inductor's own name of a kernel compiled under `triton_`; 1.6:
`args.triton.args[].access`, whether a kernel reads or writes a tensor, and `args.triton.dot`; 1.7:
`api_calls.cpu_start_ns` and `cpu_duration_ns`, the issuing thread's CPU clock), or widen a value's
meaning, which readers give older files (1.5: domain `device` also marks the work a CUDA graph launch replays)."""

TIME_SOURCES = ("emulated", "measured", "predicted")
PHASES = ("forward", "backward", "optimizer", "eval", "other")


@dataclass(frozen=True)
class Column:
    name: str
    type: pa.DataType
    doc: str
    nullable: bool = True
    minimum: int | None = None
    allowed: tuple[str, ...] | None = None
    cuda_name: str | None = None  # the CUPTI/Kineto/Chakra name this follows, when it differs


@dataclass(frozen=True)
class Table:
    name: str
    doc: str
    columns: tuple[Column, ...]
    per_rank: bool = True  # hive-partitioned by `rank=N/` directories
    unique: tuple[str, ...] = ()  # columns that identify a row within one rank

    @property
    def column_names(self) -> list[str]:
        return [c.name for c in self.columns]

    def column(self, name: str) -> Column:
        for c in self.columns:
            if c.name == name:
                return c
        raise KeyError(name)


def _c(name, type_, doc, **kw) -> Column:
    return Column(name, type_, doc, **kw)


i32, i64, s, b = pa.int32(), pa.int64(), pa.string(), pa.bool_()

RANK = _c("rank", i32, "Global rank (from the `rank=N` partition directory).", nullable=False, minimum=0)

RUN = Table(
    "run",
    "One row describing the captured run.",
    (
        _c("run_id", s, "Unique id of the run.", nullable=False),
        _c("created_at_ns", i64, "Creation time, Unix epoch nanoseconds.", nullable=False, minimum=0),
        _c(
            "source",
            s,
            "What produced the trace.",
            nullable=False,
            allowed=("emulator", "profiler", "kineto-import", "synthetic"),
        ),
        _c(
            "status",
            s,
            "Capture state: `running` until the producer finishes; `interrupted` (1.3): a stop signal ended the "
            "capture, and the tables hold what was captured until then (`attrs.interrupted_by`: the signal; "
            "`attrs.interrupted_ranks`: the ranks it stopped).",
            nullable=False,
            allowed=("running", "complete", "failed", "oom", "interrupted"),
        ),
        _c("command", s, "Command line of the traced program (JSON list of strings)."),
        _c("hardware", s, "Hardware catalog name of the (virtual or real) GPUs, e.g. `h100-sxm`."),
        _c("world_size", i32, "Number of ranks of the job.", nullable=False, minimum=1),
        _c("nnodes", i32, "Number of nodes.", minimum=1),
        _c("nproc_per_node", i32, "Ranks per node.", minimum=1),
        _c("framework", s, "Framework and version, e.g. `torch 2.15.0+cu132`."),
        _c("cuda_version", s, "CUDA runtime version seen by the program."),
        _c("producer_version", s, "Version of the tool that wrote the trace."),
        _c(
            "attrs",
            s,
            "Free-form JSON object with producer-specific metadata. Keys readers act on: `interrupted_by` and "
            "`interrupted_ranks` (see `status`); `child_processes`: rank (a string) -> a list of reports of the "
            "processes the rank started that called the producer's stubs (`pid`, `rank_pid`, `parent_pid`, "
            "`forked`, `command`, `calls`, `device_calls`, `first_api`, `first_domain`, `first_device_api`); a "
            "process with `device_calls` above 0 did device work the tables do not hold (`maya trace check` warns); "
            "`allocator_peaks`: rank (a string) -> device index (a string) -> `allocated_bytes` and `reserved_bytes`, "
            "the peaks of torch's CUDA caching allocator over the rank's whole run (`max_memory_allocated()`, "
            "`max_memory_reserved()`), kept across the script's own peak resets: a script that resets them (each "
            "logged step, say) reads less than the run's peak recorded here.",
        ),
    ),
    per_rank=False,
)

DEVICES = Table(
    "devices",
    "The device each captured rank ran on, and which ranks it stands for.",
    (
        RANK,
        _c("local_rank", i32, "Rank within its node.", minimum=0),
        _c("node", i32, "Node index.", minimum=0),
        _c("device_index", i32, "CUDA device ordinal.", minimum=0),
        _c("device_name", s, "Name the device reports, e.g. `NVIDIA H100 80GB HBM3`."),
        _c("hardware", s, "Hardware catalog name."),
        _c("sm_major", i32, "Compute capability major.", minimum=0),
        _c("sm_minor", i32, "Compute capability minor.", minimum=0),
        _c("sm_count", i32, "Number of streaming multiprocessors.", minimum=0),
        _c("memory_bytes", i64, "Device memory capacity.", minimum=0),
        _c("represents", pa.list_(i32), "Ranks this captured rank stands for (deduplication); null means only itself."),
        _c("hostname", s, "Host the rank ran on."),
        _c("pid", i64, "Process id.", minimum=0),
    ),
    unique=("device_index",),
)

API_CALLS = Table(
    "api_calls",
    "The event stream: every intercepted device-API call of a rank, in issue order. A call that "
    "enqueues device work (kernel, copy, collective) also carries that work's device interval.",
    (
        RANK,
        _c("seq", i64, "Position of the call in the rank's stream of calls (0-based).", nullable=False, minimum=0),
        _c("thread_id", i64, "Host thread that made the call."),
        _c(
            "api",
            s,
            "API function, e.g. `cudaLaunchKernel`, `cublasGemmEx`, `ncclAllReduce`; "
            "`kernel`, `memcpy` or `memset` for device work with no host call.",
            nullable=False,
        ),
        _c(
            "domain",
            s,
            "Library the API belongs to; `device` for device work no host call of its own issued (a kernel "
            "without its launch, work a CUDA graph launch replayed).",
            nullable=False,
            allowed=("runtime", "driver", "cublas", "cublaslt", "cudnn", "nccl", "nvml", "device", "other"),
        ),
        _c("status", i32, "Return code (0 = success)."),
        _c("start_ns", i64, "Host start time, ns.", nullable=False),
        _c("duration_ns", i64, "Host duration, ns.", minimum=0),
        _c(
            "cpu_start_ns",
            i64,
            "CPU time of the issuing thread (`CLOCK_THREAD_CPUTIME_ID`) when the call started, ns (1.7): the "
            "thread's host work between two of its calls is the difference, whatever else ran on the CPU or however "
            "long it slept. Null: not read (older traces, measured ones; on work a CUDA graph launch replays, all "
            "but the last row).",
            minimum=0,
        ),
        _c(
            "cpu_duration_ns",
            i64,
            "CPU time of the issuing thread in the call, ns (1.7; null where `cpu_start_ns` is).",
            minimum=0,
        ),
        _c("time_source", s, "Where the times come from.", nullable=False, allowed=TIME_SOURCES),
        _c("correlation_id", i64, "Links the host call to its device work.", cuda_name="correlation"),
        _c("op_id", i64, "Enclosing framework op (`ops.op_id`)."),
        _c("device", i32, "Device ordinal the call targets.", minimum=0),
        _c("stream_id", i64, "Stream the work is enqueued on (0 = legacy default stream).", cuda_name="stream"),
        _c("device_start_ns", i64, "Start of the device work, ns (measured or predicted)."),
        _c("device_duration_ns", i64, "Duration of the device work, ns.", minimum=0),
        _c("kernel_id", i64, "Launched kernel (`kernels.kernel_id`)."),
        _c("grid_x", i32, "Grid size x.", minimum=0),
        _c("grid_y", i32, "Grid size y.", minimum=0),
        _c("grid_z", i32, "Grid size z.", minimum=0),
        _c("block_x", i32, "Block size x.", minimum=0),
        _c("block_y", i32, "Block size y.", minimum=0),
        _c("block_z", i32, "Block size z.", minimum=0),
        _c("shared_mem_bytes", i32, "Dynamic shared memory per block.", minimum=0, cuda_name="shared memory"),
        _c("registers_per_thread", i32, "Registers per thread (measured traces).", minimum=0),
        _c("gemm_m", i64, "GEMM m (cuBLAS column-major convention).", minimum=0),
        _c("gemm_n", i64, "GEMM n.", minimum=0),
        _c("gemm_k", i64, "GEMM k.", minimum=0),
        _c("gemm_batch", i64, "GEMM batch count (1 when not batched).", minimum=0),
        _c("gemm_trans_a", b, "Operand A transposed."),
        _c("gemm_trans_b", b, "Operand B transposed."),
        _c("gemm_dtype_a", s, "Element type of A, e.g. `bf16`."),
        _c("gemm_dtype_b", s, "Element type of B."),
        _c("gemm_dtype_c", s, "Element type of C/D."),
        _c("gemm_compute_type", s, "Compute type, e.g. `fp32`, `tf32`."),
        _c("bytes", i64, "Bytes moved or set (memcpy/memset) or requested (allocation).", minimum=0),
        _c("memcpy_kind", s, "Copy direction.", allowed=("HtoD", "DtoH", "DtoD", "HtoH", "PtoP", "default")),
        _c("comm_id", s, "Communicator (`communicators.comm_id`)."),
        _c("collective_name", s, "Collective or p2p operation, e.g. `allreduce`, `send`."),
        _c("in_msg_nelems", i64, "Input element count.", minimum=0),
        _c("out_msg_nelems", i64, "Output element count.", minimum=0),
        _c("comm_dtype", s, "Element type of the collective."),
        _c("root_rank", i32, "Root rank within the communicator (broadcast/reduce).", minimum=0),
        _c(
            "peer_rank", i32, "Peer rank within the communicator (send/recv).", minimum=0, cuda_name="src_rank/dst_rank"
        ),
        _c("comm_seq", i64, "Sequence number of the call on its communicator.", minimum=0, cuda_name="seq"),
        _c("event_id", i64, "CUDA event recorded, waited on or synchronised."),
        _c(
            "data_dependent",
            b,
            "The call's result depends on device data the emulator does not "
            "compute (e.g. `.item()`): the value returned was a stand-in.",
        ),
        _c(
            "args",
            s,
            "Other arguments as a JSON object (e.g. `attention` shapes of a cuDNN graph; "
            "`cuda_graph_replay`: device work issued by a CUDA graph launch, as captured; `elements`: the "
            "element count of a library kernel, e.g. one time step of a cuDNN RNN; `triton` (1.2): the arguments of "
            "a Triton kernel's launch (Inductor's generated kernels, user kernels) — `args`, each argument by name in "
            "the kernel's order, a tensor with its `dtype`, `shape` and `bytes` (elements x element size) and, "
            "where the kernel's source shows it (1.6), its `access` (`read`, `write` or `read-write`), a scalar "
            "(`xnumel`, `r0_numel`, ...) with its `value`; `constexprs`, the compile-time constants by name where the "
            "launcher knows them; `num_stages`; `dot` (1.6), true where the kernel's source calls `tl.dot`; "
            "`name` (1.4), Inductor's own name for a kernel it compiled under its placeholder `triton_`, as before "
            "torch 2.6).",
        ),
    ),
    unique=("seq",),
)

OPS = Table(
    "ops",
    "Framework context: the ops (aten ops, modules, annotations) that enclose device calls.",
    (
        RANK,
        _c("op_id", i64, "Id of the op within the rank.", nullable=False, minimum=0),
        _c("parent_op_id", i64, "Enclosing op, if any."),
        _c("name", s, "Op name, e.g. `aten::mm`.", nullable=False),
        _c("thread_id", i64, "Host thread."),
        _c("start_ns", i64, "Start, ns.", nullable=False),
        _c("end_ns", i64, "End, ns."),
        _c("time_source", s, "Where the times come from.", allowed=TIME_SOURCES),
        _c(
            "input_shapes",
            pa.list_(pa.list_(i64)),
            "Shape of each input (empty list: not a tensor).",
            cuda_name="Input Dims",
        ),
        _c("input_dtypes", pa.list_(s), "Element type of each input.", cuda_name="Input type"),
        _c(
            "module_path",
            s,
            "Dotted path of the enclosing nn.Module, e.g. `model.layers.3.mlp`. A module's forward is itself an op "
            "named `nn.Module: ` and its path; a producer may also attribute backward ops to the module they "
            "differentiate.",
        ),
        _c(
            "phase",
            s,
            "Training phase; `eval`: a validation or evaluation forward pass (a model called in "
            "eval mode or under inference mode), not part of a training iteration. Ops under a module's forward "
            "op (`nn.Module: ...`) that is itself in the `backward` phase are a forward pass run again "
            "(activation recomputation: counted in HFU, not MFU); no other backward op is, whatever its "
            "`module_path`.",
            allowed=PHASES,
        ),
        _c("iteration", i32, "Training iteration (optimizer steps so far).", minimum=0),
        _c(
            "seq_nr",
            i64,
            "Autograd sequence number linking a backward op to its forward op.",
            cuda_name="Sequence number",
        ),
    ),
    unique=("op_id",),
)

KERNELS = Table(
    "kernels",
    "Dictionary of the kernels a rank registered or launched.",
    (
        RANK,
        _c("kernel_id", i64, "Id referenced by `api_calls.kernel_id`.", nullable=False, minimum=0),
        _c("name", s, "Kernel name as registered (mangled where available).", nullable=False),
        _c("demangled", s, "Demangled name."),
        _c(
            "family",
            s,
            "Kernel family used by the estimators.",
            allowed=(
                "gemm",
                "attention",
                "elementwise",
                "reduction",
                "normalization",
                "softmax",
                "embedding",
                "optimizer",
                "copy",
                "collective",
                "other",
            ),
        ),
        _c("library", s, "Library that owns the kernel, e.g. `torch`, `cublas`, `nccl`, `triton`."),
    ),
    unique=("kernel_id",),
)

COMMUNICATORS = Table(
    "communicators",
    "Communicators (NCCL) a rank belongs to.",
    (
        RANK,
        _c("comm_id", s, "Id shared by all members (hash of the NCCL unique id).", nullable=False),
        _c("comm_rank", i32, "This rank's index in the communicator.", nullable=False, minimum=0),
        _c("comm_size", i32, "Number of members.", nullable=False, minimum=1),
        _c("pg_name", s, "Process-group name.", cuda_name="Process Group Name"),
        _c("pg_desc", s, "Process-group description.", cuda_name="Process Group Description"),
        _c(
            "ranks",
            pa.list_(i32),
            "Global ranks of the members, by comm_rank (when known).",
            cuda_name="Process Group Ranks",
        ),
        _c("device", i32, "Device ordinal.", minimum=0),
    ),
    unique=("comm_id",),
)

MEMORY_EVENTS = Table(
    "memory_events",
    "Device and pinned-host memory allocations, frees and out-of-memory failures.",
    (
        RANK,
        _c("seq", i64, "Order of the event within the rank.", nullable=False, minimum=0),
        _c("ts_ns", i64, "Time, ns.", nullable=False),
        _c("kind", s, "Event kind.", nullable=False, allowed=("alloc", "free", "oom")),
        _c("space", s, "Memory space.", allowed=("device", "host", "managed")),
        _c("address", i64, "Address allocated or freed."),
        _c("bytes", i64, "Size (requested size for `oom`).", nullable=False, minimum=0),
        _c("device", i32, "Device ordinal.", minimum=0),
        _c("stream_id", i64, "Stream for stream-ordered allocations."),
        _c("allocated_bytes", i64, "Device bytes allocated after the event.", minimum=0, cuda_name="Total Allocated"),
        _c("api_seq", i64, "The `api_calls.seq` of the call behind the event."),
        _c("op_id", i64, "Enclosing framework op."),
    ),
    unique=("seq",),
)

TABLES: dict[str, Table] = {t.name: t for t in (RUN, DEVICES, API_CALLS, OPS, KERNELS, COMMUNICATORS, MEMORY_EVENTS)}
