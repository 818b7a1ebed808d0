"""Runs inside each emulated rank process: the user's script, unchanged, with framework context capture.

`python -m maya.collectors.emulator.runner SCRIPT ARGS` (or `-m MODULE ARGS`), with the stub
libraries preloaded. Context comes from torch.profiler's CPU activity (aten ops with input shapes),
an optimizer-step hook that marks iterations (`ProfilerStep#N`) and module hooks that mark the
module path (`nn.Module: GPT.blocks.0.mlp`). At exit the Kineto trace, the script's outcome and
the native recorder's buffers are written to `$MAYA_EMU_OUT`.
"""
from __future__ import annotations

import ctypes
import json
import os
import sys
import traceback
import weakref
from pathlib import Path

MODULE_PREFIX = "nn.Module: "


def _module_hooks(torch):
    """Global forward hooks opening a profiler range named after each module's path."""
    names: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
    open_ranges: dict[int, list] = {}
    enter = torch.ops.profiler._record_function_enter_new
    leave = torch.ops.profiler._record_function_exit._RecordFunction

    compiling = torch.compiler.is_compiling

    def pre(module, args):  # inside torch.compile regions the hooks fold away (no module paths there)
        if compiling():
            return
        if module not in names:
            root = type(module).__name__
            for sub_name, sub in module.named_modules():
                names.setdefault(sub, f"{root}.{sub_name}" if sub_name else root)
        open_ranges.setdefault(id(module), []).append(enter(MODULE_PREFIX + names[module], None))

    def post(module, args, output):
        if compiling():
            return
        stack = open_ranges.get(id(module))
        if stack:
            leave(stack.pop())

    from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook
    return [register_module_forward_pre_hook(pre), register_module_forward_hook(post, always_call=True)]


def _process_groups() -> dict[str, list[int]]:
    """Global ranks of every process group this rank created, by group name."""
    import torch.distributed as dist
    if not (dist.is_available() and dist.is_initialized()):
        return {}
    return {name: dist.get_process_group_ranks(pg) for pg, name in dist.distributed_c10d._world.pg_names.items()}


class _Iterations:
    """Kineto CPU profiling through the low-level API (torch.profiler's wrapper imports seconds of
    modules), with `ProfilerStep#N` ranges advanced by an optimizer-step hook."""

    def __init__(self, torch):
        from torch._C._profiler import _ExperimentalConfig
        from torch.autograd import (ProfilerActivity, ProfilerConfig, ProfilerState, _enable_profiler,
                                    _prepare_profiler)
        config = ProfilerConfig(ProfilerState.KINETO, True, False, False, False, False, _ExperimentalConfig())
        _prepare_profiler(config, {ProfilerActivity.CPU})
        _enable_profiler(config, {ProfilerActivity.CPU})
        self.enter = torch.ops.profiler._record_function_enter_new
        self.leave = torch.ops.profiler._record_function_exit._RecordFunction
        self.step = 0
        self.current = self.enter("ProfilerStep#0", None)

    def next(self, *_) -> None:
        self.leave(self.current)
        self.step += 1
        self.current = self.enter(f"ProfilerStep#{self.step}", None)

    def finish(self, path: Path) -> None:
        from torch.autograd import _disable_profiler
        self.leave(self.current)
        _disable_profiler().save(str(path))


def main(argv: list[str]) -> int:
    out = Path(os.environ["MAYA_EMU_OUT"])
    import torch
    from torch.optim.optimizer import register_optimizer_step_post_hook

    from maya.collectors.profiler.workload_script import run_script

    from .isolation import install as isolate_ranks

    isolate_ranks()
    status, error, code = "complete", None, 0
    iterations = _Iterations(torch)
    handles = [register_optimizer_step_post_hook(iterations.next), *_module_hooks(torch)]
    try:
        run_script(argv)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        status = "complete" if code == 0 else "failed"
    except torch.OutOfMemoryError as e:
        status, error, code = "oom", "".join(traceback.format_exception(e)), 1
        traceback.print_exc()
    except BaseException as e:  # the script's own failure: keep the partial trace, show its traceback
        status, error, code = "failed", "".join(traceback.format_exception(e)), 1
        traceback.print_exc()
    finally:
        for h in handles:
            h.remove()
        iterations.finish(out / "kineto.json")
        (out / "process_groups.json").write_text(json.dumps(_process_groups()))
        (out / "status.json").write_text(json.dumps({"status": status, "exit_code": code, "error": error,
                                                     "pid": os.getpid(), "torch": torch.__version__}))
        ctypes.CDLL(None).maya_emu_finish()
    return code


if __name__ == "__main__":
    exit_code = main(sys.argv[1:])
    # The script's exit handlers run; interpreter teardown (seconds of module cleanup, and the
    # autograd device threads that can abort during it) is skipped: the capture is already flushed.
    import atexit
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(exit_code)
