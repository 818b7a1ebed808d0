"""Runs inside each emulated rank process: the user's script, unchanged, with framework context capture.

`python -m maya.emulator.runner SCRIPT ARGS` (or `-m MODULE ARGS`), with the stub
libraries preloaded. Context comes from Maya's RecordFunction observer (libmaya_ops.so: every aten
op, autograd node and record_function range with its input shapes, tagged onto the CUDA calls it
makes), module hooks that open a range per module (`nn.Module: GPT.blocks.0.mlp`) and, around a
model called in eval mode or under inference mode, a `maya::eval` range (its ops are phase `eval`),
the iteration clock (iteration_clock.py: optimizer steps, `--iterations`), the arguments of Triton
launches (triton_launches.py), Transformer Engine's extension calls as `te::` ops with their tensors' shapes
(te_calls.py) and, when the launcher names one, the device-time oracle that answers CUDA-event
timings (device_time.py) and, when asked, torch's allocator history (memory_history.py); at the end of the script's
path, stand-ins for CUDA extensions only a GPU build makes (standins/: flash-attn's `flash_attn_2_cuda`,
grouped_gemm's `grouped_gemm_backend`, MegaBlocks' `megablocks_ops`); a
`torch.multiprocessing.spawn` runs the worker of the rank's local index in the rank
(spawned_workers.py; refused in a rank a launcher's command started). A stop signal (SIGINT, SIGTERM, SIGHUP: the
launcher passes its own on as SIGINT) interrupts the script as Ctrl-C does, once; its status is then `interrupted`.
At exit the script's outcome and the native recorders' buffers are written to `$MAYA_EMU_OUT`.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import sys
import threading
import traceback
import warnings
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from maya.core import settings
from maya_trace_spec.vocabulary import EVAL_RANGE

from .capture_format import MODULE_PREFIX

if TYPE_CHECKING:
    from .iteration_clock import IterationClock

OPS_LIBRARY = "libmaya_ops.so"
STANDINS = Path(__file__).parent / "standins"
"""Modules standing in for CUDA extensions a CPU-only install lacks, at the end of a rank's path: an installed
extension comes first and wins (`standins/`: `flash_attn_2_cuda.py`, `grouped_gemm_backend.py`, `megablocks_ops.py`)."""


class _Observer:
    """The native op observer: ranges for modules, the iteration counter, the final flush."""

    def __init__(self, lib_dir: Path, out: Path):
        self.lib = ctypes.CDLL(str(lib_dir / OPS_LIBRARY))
        self.lib.maya_ops_install.argtypes = [ctypes.c_char_p]
        self.lib.maya_ops_intern.argtypes = [ctypes.c_char_p]
        self.lib.maya_ops_intern.restype = ctypes.c_int32
        self.lib.maya_ops_range_enter.argtypes = [ctypes.c_int32]
        self.lib.maya_ops_range_enter.restype = ctypes.c_int64
        self.lib.maya_ops_range_exit.argtypes = [ctypes.c_int64]
        self.lib.maya_ops_value_provenance.argtypes = [ctypes.c_void_p]
        self.lib.maya_ops_value_provenance.restype = ctypes.c_int
        self.value_provenance = self.lib.maya_ops_value_provenance
        """Whether a device storage (by its base address) holds values the host knows (`host_values.cpp`)."""
        self.lib.maya_ops_install(str(out).encode())

    def module_hooks(self, torch, clock: IterationClock) -> list:
        """Global forward hooks opening a range named after each module's path (the outermost one in
        eval mode or under inference mode inside a `maya::eval` range) and telling the iteration clock.
        Per call they do a dict lookup and a ctypes call each way (modules by id, checked against a
        weak reference; ranges on a per-thread stack, since module calls nest)."""
        names: dict[int, tuple[weakref.ref, int]] = {}
        local = threading.local()
        enter, leave, intern = self.lib.maya_ops_range_enter, self.lib.maya_ops_range_exit, self.lib.maya_ops_intern
        compiling = torch.compiler.is_compiling
        inference = torch.is_inference_mode_enabled
        evaluating = intern(EVAL_RANGE.encode())

        def name_id(module) -> int:
            known = names.get(id(module))
            if known is not None and known[0]() is module:
                return known[1]
            root = type(module).__name__  # the first module called names the tree below it
            for sub_name, sub in module.named_modules():
                known = names.get(id(sub))
                if known is None or known[0]() is not sub:
                    path = f"{root}.{sub_name}" if sub_name else root
                    names[id(sub)] = (weakref.ref(sub), intern((MODULE_PREFIX + path).encode()))
            return names[id(module)][1]

        def pre(module, args):  # inside torch.compile regions the hooks fold away (no module paths there)
            if compiling():
                return
            stack = local.__dict__.setdefault("stack", [])
            if not stack:
                clock.module_called()
            ranges = [enter(evaluating)] if not stack and (not module.training or inference()) else []
            stack.append([*ranges, enter(name_id(module))])

        def post(module, args, output):
            if compiling():
                return
            stack = local.__dict__.get("stack")
            if stack:
                for op in reversed(stack.pop()):
                    leave(op)

        from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook

        # torch warns at every call of a compiled module that global hooks exist: these are Maya's, not the
        # script's, and fold away inside the compiled region, so the warning would only be noise to its user
        warnings.filterwarnings(
            "ignore", message=r"Using `torch\.compile\(module\)` when there are global hooks", category=UserWarning
        )
        return [register_module_forward_pre_hook(pre), register_module_forward_hook(post, always_call=True)]

    def finish(self) -> None:
        self.lib.maya_ops_finish()

    def values(self) -> dict:
        """Device values computed on the host and routing stand-ins (`host_values.cpp`)."""
        self.lib.maya_ops_values_summary.restype = ctypes.c_char_p
        return json.loads(self.lib.maya_ops_values_summary().decode())


class _ProcessGroups:
    """Global ranks of every process group the script created, by group name, kept across
    `destroy_process_group` (snapshotted before it runs)."""

    def __init__(self):
        import torch.distributed as dist

        self.dist, self.groups = dist, {}
        if not dist.is_available():
            return
        destroy = dist.destroy_process_group

        def destroy_process_group(*args, **kwargs):
            self.snapshot()
            return destroy(*args, **kwargs)

        dist.destroy_process_group = destroy_process_group

    def snapshot(self) -> dict[str, list[int]]:
        dist = self.dist
        if dist.is_available() and dist.is_initialized():
            self.groups.update(
                {name: dist.get_process_group_ranks(pg) for pg, name in dist.distributed_c10d._world.pg_names.items()}
            )
        return self.groups


def _cpu_seconds() -> float:
    """CPU time of this rank process and the children it waited for (user + system; a rank forked
    from the zygote counts from its fork)."""
    import resource

    return sum(
        u.ru_utime + u.ru_stime for u in map(resource.getrusage, (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    )


def _stop_reason(e: BaseException) -> str | None:
    """Why the emulator stopped the rank (a loop on device values that makes no progress), with the
    script line that read the value; None if it did not."""
    fn = ctypes.CDLL(None).maya_emu_stop_reason
    fn.restype = ctypes.c_char_p
    reason = fn()
    if not reason:
        return None
    frames = traceback.extract_tb(e.__traceback__)
    where = f" at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""
    return reason.decode() + where


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
EXIT_INTERRUPTED = 128 + signal.SIGINT
"""A rank's exit code when a stop signal interrupted it (the shell's convention for Ctrl-C)."""


def _interrupt_on_stop_signals() -> Callable[[], None]:
    """Make a stop signal raise KeyboardInterrupt in the script, once: later ones do nothing, so that the
    capture is written whatever follows (a process group's signal, then the launcher's). Returns what makes
    the first do nothing too (the script is over). The handlers stay: one replaced by SIG_IGN while its signal
    is pending would raise an OSError in its place."""
    armed = True

    def stop(signum: int, frame) -> None:
        nonlocal armed
        if armed:
            armed = False
            raise KeyboardInterrupt(signal.Signals(signum).name)

    def disarm() -> None:
        nonlocal armed
        armed = False

    for sig in STOP_SIGNALS:
        signal.signal(sig, stop)
    return disarm


RANK_PID_ENV = settings.EMU_RANK_PID.name
"""The rank's pid, for the processes it starts: they inherit the preloaded stubs, which count their calls, not
recorded (native/children.c)."""


def main(argv: list[str]) -> int:
    out = Path(os.environ[settings.EMU_OUT.name])
    os.environ[RANK_PID_ENV] = str(os.getpid())
    import torch
    from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

    from maya.core.script_runner import run_script

    from .allocator_peaks import AllocatorPeaks
    from .device_time import install as answer_event_timings
    from .isolation import install as isolate_ranks
    from .iteration_clock import ITERATIONS_ENV, IterationLimitReached, native_clock
    from .memory_history import install as record_memory_history
    from .memory_history import written
    from .spawned_workers import install as run_spawned_workers_in_rank
    from .te_calls import install as describe_te_calls
    from .triton_launches import install as describe_triton_launches

    isolate_ranks()
    peaks = AllocatorPeaks(torch)
    run_spawned_workers_in_rank()
    launches = describe_triton_launches(out)
    timings = answer_event_timings(out)
    status, error, code, stopped, interrupted_by = "complete", None, 0, None, None
    observer = _Observer(Path(os.environ[settings.EMU_LIBS.name]), out)
    launches.provenance = observer.value_provenance
    describe_te_calls(observer.lib)
    clock = native_clock(observer.lib, ctypes.CDLL(None), int(os.environ.get(ITERATIONS_ENV) or 0))
    groups = _ProcessGroups()
    handles = [
        register_optimizer_step_pre_hook(clock.optimizer_stepping),
        register_optimizer_step_post_hook(clock.optimizer_stepped),
        *observer.module_hooks(torch, clock),
    ]
    memory = record_memory_history(torch)  # before the script's first allocation
    if memory:
        handles += memory.optimizer_hooks()
    disarm = _interrupt_on_stop_signals()
    sys.path.append(str(STANDINS))
    if appended := settings.EMU_APPEND_PATH.get():  # last, as torchtune's CLI appends the working directory
        sys.path.append(appended)
    try:
        run_script(argv)
    except IterationLimitReached as e:
        stopped = e.args[0]
    except KeyboardInterrupt as e:  # stopped by a signal: what was captured until then is kept
        status, code = "interrupted", EXIT_INTERRUPTED
        interrupted_by = e.args[0] if e.args and e.args[0] in signal.Signals.__members__ else "SIGINT"
        print(f"maya emulator: {interrupted_by} after {clock.iteration} training iterations", file=sys.stderr)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        status = "complete" if code == 0 else "failed"
        if isinstance(e.code, str):  # sys.exit("message"): Python prints the message; keep it too
            error = e.code
            print(e.code, file=sys.stderr)
    except torch.OutOfMemoryError as e:
        status, error, code = "oom", "".join(traceback.format_exception(e)), 1
        traceback.print_exc()
    except BaseException as e:  # the script's own failure: keep the partial trace, show its traceback
        status, error, code = "failed", "".join(traceback.format_exception(e)), 1
        traceback.print_exc()
        stop = _stop_reason(e)
        if stop:  # the emulator stopped a loop: its reason is the error's last line
            error += stop + "\n"
    finally:
        disarm()  # nothing stops the capture's writing
        for h in handles:
            h.remove()
        observer.finish()
        (out / "process_groups.json").write_text(json.dumps(groups.snapshot()))
        try:
            (out / "status.json").write_text(
                json.dumps(
                    {
                        "status": status,
                        "exit_code": code,
                        "error": error,
                        "pid": os.getpid(),
                        "torch": torch.__version__,
                        "cpu_s": _cpu_seconds(),
                        "stopped_at_iteration": stopped,
                        "interrupted_by": interrupted_by,
                        "optimizer_iterations": clock.iteration,
                        "host_values": observer.values(),
                        "device_time": timings.report() if timings else None,
                        "allocator": peaks.read(),
                    }
                )
            )
        finally:  # the capture is closed whatever the status's writing raised
            ctypes.CDLL(None).maya_emu_finish()
    written(memory, interrupted_by)  # last: the capture is whole whatever the history's writing takes
    return code


def run_and_exit(argv: list[str]) -> None:
    """Run the script, then end the process: the script's exit handlers run; interpreter teardown
    (seconds of module cleanup, and the autograd device threads that can abort during it) is skipped,
    since the capture is already flushed."""
    exit_code = main(argv)
    import atexit

    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(exit_code)


if __name__ == "__main__":
    run_and_exit(sys.argv[1:])
