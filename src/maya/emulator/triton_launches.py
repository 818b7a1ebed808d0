"""Triton launches described for the trace: the arguments each launch passes (tensors' shapes, dtypes and
sizes, scalars such as `xnumel`, the kernel's constexprs), so its work is known without the kernel's code.

Runs inside each emulated rank. Triton kernels reach the stubs through two launchers: Triton's own
(`CudaLauncher`: user kernels and Inductor's kernels when its static launcher is off; Triton 3.3 loads it outside
`sys.modules`, so it is also found through `triton.backends`) and Inductor's static
launcher (`StaticallyLaunchedTritonKernel.run`, and the C launcher Inductor swaps in after a kernel's first
launch, `_FastCudaLauncher`). They are wrapped once their module is imported (importing
them eagerly would cost ~8 s per rank for scripts that never use them). Before a launch the wrapper tells
the native recorder the id of the launch's description (`maya_emu_launch_note`); the next `cuLaunchKernel`
of the thread carries it (record field a6), and the descriptions go, once each, to `triton_launches.jsonl`
in the capture (`convert.py` puts them in `api_calls.args` under `triton`). Triton's launcher also has the kernel's
`@triton.jit` function: each tensor argument a user kernel reads or writes carries that `access`, and a user kernel
calling `tl.dot` is marked `dot` (`triton_access.py`; not Inductor's kernels, whose names say it).
"""

from __future__ import annotations

import ctypes
import importlib.abc
import json
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

from .capture_format import NOTES_FILE
from .triton_access import analyse

TRITON_LAUNCHER = "triton.backends.nvidia.driver"
TRITON_BACKENDS = "triton.backends"
STATIC_LAUNCHER = "torch._inductor.runtime.static_triton_launcher"
INDUCTOR_HEURISTICS = "torch._inductor.runtime.triton_heuristics"
INDUCTOR_PLACEHOLDER = "triton_"
"""The name Inductor compiles every generated kernel under unless `triton.unique_kernel_names` is set (its default
until torch 2.6), so that kernels of the same source share a cache entry: the CUDA function and Triton's name are
this placeholder, and the kernel's own name (`triton_poi_fused_add_0`, ...) is only in its autotuner's
`inductor_meta["kernel_name"]`."""
FLEX_BLOCK_COUNTS = ("arg_KV_NUM_BLKS", "arg_FULL_KV_NUM_BLKS", "arg_Q_NUM_BLKS", "arg_FULL_Q_NUM_BLKS")
"""Flex-attention templates' BlockMask arguments holding the number of blocks each row computes (int32,
[batch, heads, row blocks]): partial blocks (mask applied) and full ones."""


class LaunchNotes:
    """Ids for distinct launch descriptions (kernel, constants, argument shapes and values), written once each."""

    def __init__(self, out: Path, note: Callable[[int], None]):
        import torch

        self._path = out / NOTES_FILE
        self._ids: dict[tuple, int] = {}
        self._note = note
        self._tensor = torch.Tensor
        self._int32 = torch.int32
        self.provenance: Callable[[int], int] | None = None
        """Whether a device storage (by its base address) holds values the host knows (`host_values.cpp`):
        set once the op observer is loaded; until then no device value is read."""

    def launch(
        self,
        kernel: str,
        names: list[str],
        args: tuple,
        constants: tuple = (),
        num_stages: int | None = None,
        name: str | None = None,
        access: dict[str, str] | None = None,
        dot: bool = False,
    ) -> None:
        """Describe the launch that follows on this thread (`constants`: the kernel's constexprs as
        `constant_items` gives them; `name`: Inductor's name for a kernel compiled under its shared placeholder
        name, `INDUCTOR_PLACEHOLDER`; `access`: whether the kernel reads or writes each pointer argument,
        `triton_access.argument_access`; `dot`: whether its source calls `tl.dot`, `triton_access.analyse`). Never
        fails the launch: what cannot be described goes undescribed."""
        try:
            tensor = self._tensor
            blocks = self._block_counts(names, args) if FLEX_BLOCK_COUNTS[0] in names else None
            key = (
                kernel,
                name,
                constants,
                *[(a.shape, a.dtype) if isinstance(a, tensor) else _key(a) for a in args[: len(names)]],
                blocks,
                dot,
                tuple(sorted(access.items())) if access else None,  # two kernels of one name may differ in it
            )
            note = self._ids.get(key)
            if note is None:
                entry = {
                    "id": len(self._ids) + 1,
                    "kernel": kernel,
                    "args": [_describe(n, a, access) for n, a in zip(names, args)],
                    "constexprs": dict(constants),
                }
                if name is not None:
                    entry["name"] = name
                if blocks is not None:
                    entry["block_counts"] = dict(blocks)
                if num_stages is not None:
                    entry["num_stages"] = num_stages
                if dot:
                    entry["dot"] = True
                with self._path.open("a") as f:
                    f.write(json.dumps(entry) + "\n")
                note = self._ids[key] = entry["id"]
        except Exception:
            note = 0
        self._note(note)

    def _block_counts(self, names: list[str], args: tuple) -> tuple | None:
        """A flex-attention template's block counts, summed over its BlockMask's rows, where the host knows
        them (a mask built by ops the host could compute, as `create_block_mask` outside `torch.compile` is):
        sorted (argument name, sum) pairs, or None when any of them is a value only a GPU computes."""
        if self.provenance is None:
            return None
        counts = []
        for name, a in zip(names, args):
            if name not in FLEX_BLOCK_COUNTS:
                continue
            if not (isinstance(a, self._tensor) and a.dtype == self._int32 and a.is_contiguous()):
                return None
            if a.numel() and self.provenance(a.untyped_storage().data_ptr()) == 0:
                return None
            # virtual device memory is host memory: the bytes are read without a copy (no API call recorded)
            raw = ctypes.string_at(a.data_ptr(), a.numel() * 4) if a.numel() else b""
            counts.append((name, int(sum(memoryview(raw).cast("i")))))
        return tuple(sorted(counts)) or None


def constant_items(constants: dict[str, Any]) -> tuple:
    """A kernel's numeric constexprs as sorted (name, value) pairs (hashable, JSON-ready)."""
    return tuple(sorted((k, v) for k, v in constants.items() if type(v) in (bool, int, float)))


def _tensor(a: Any):
    """The tensor behind an argument (a tensor, or a TMA descriptor's base), else None."""
    import torch

    if isinstance(a, torch.Tensor):
        return a
    base = getattr(a, "base", None)
    return base if isinstance(base, torch.Tensor) else None


def _key(a: Any) -> Any:
    """What identifies a non-tensor argument's description."""
    if a is None or isinstance(a, (bool, int, float, str)):
        return a
    t = _tensor(a)
    return (t.shape, t.dtype) if t is not None else type(a).__name__


def _describe(name: str, a: Any, access: dict[str, str] | None = None) -> dict:
    t = _tensor(a)
    if t is not None:
        described = {
            "name": name,
            "dtype": str(t.dtype).removeprefix("torch."),
            "shape": list(t.shape),
            "bytes": t.numel() * t.element_size(),
        }
        if access and name in access:
            described["access"] = access[name]
        return described
    if isinstance(a, (bool, int, float)):
        return {"name": name, "value": a}
    return {"name": name}


# ------------------------------------------------------------------ the launchers


def _wrap_triton_launcher(module: ModuleType, notes: LaunchNotes) -> None:
    cls = module.CudaLauncher
    if getattr(cls, "_maya_wrapped", False):  # reached both as a module and as a loaded backend
        return
    cls._maya_wrapped = True
    init, call = cls.__init__, cls.__call__

    def __init__(self, src, metadata):
        init(self, src, metadata)
        try:
            self._maya_launch = _triton_description(src, metadata)
        except Exception:  # a source this code does not know: its launches go undescribed
            pass
        try:
            if not _inductors(src):  # Inductor's kernels say their tensors' roles in their names
                self._maya_access, self._maya_dot = analyse(src.fn)
        except Exception:  # a source that cannot be read: its arguments' access goes unsaid
            pass

    def __call__(self, gridX, gridY, gridZ, stream, function, kernel_metadata, launch_metadata, enter, exit_, *args):
        described = getattr(self, "_maya_launch", None)
        if described is not None:
            notes.launch(
                *described[:2],
                args,
                *described[2:],
                access=getattr(self, "_maya_access", None),
                dot=getattr(self, "_maya_dot", False),
            )
        return call(self, gridX, gridY, gridZ, stream, function, kernel_metadata, launch_metadata, enter, exit_, *args)

    cls.__init__, cls.__call__ = __init__, __call__


def _inductors(src: Any) -> bool:
    """Whether Triton's launcher runs one of Inductor's kernels (generated or a template: torch 2.5-2.7, or
    `TORCHINDUCTOR_USE_STATIC_CUDA_LAUNCHER=0`), by its name: Inductor names each `triton_<kind>_...`, or compiles it
    under its placeholder `INDUCTOR_PLACEHOLDER` (`triton_`), and the simulator prices it by its arguments' names
    (`triton_work.is_inductors`), so its source is not read."""
    name = getattr(src, "name", None) or getattr(getattr(src, "fn", None), "__name__", "")
    return str(name).lower().startswith(INDUCTOR_PLACEHOLDER)


def _wrap_backend_launchers(module: ModuleType, notes: LaunchNotes) -> None:
    """The launcher of each backend Triton discovered (`triton.backends.backends`). Triton 3.3 (torch 2.7) loads a
    backend's `driver.py` from its file under the bare backend name, outside `sys.modules`, so its `CudaLauncher` is
    not `triton.backends.nvidia.driver`'s: found through the driver class's globals."""
    for backend in getattr(module, "backends", {}).values():
        launcher = getattr(getattr(backend.driver, "__init__", None), "__globals__", {}).get("CudaLauncher")
        if isinstance(launcher, type):
            _wrap_triton_launcher(SimpleNamespace(CudaLauncher=launcher), notes)


def _triton_description(src, metadata) -> tuple:
    """Kernel name, argument names (in launch order), constexprs and stages of a kernel Triton compiled (and,
    added by `_name_placeholder`, Inductor's name for it where Triton's is `INDUCTOR_PLACEHOLDER`)."""
    fn = getattr(src, "fn", None)
    arg_names = list(getattr(fn, "arg_names", ()))
    keys = list(src.signature) if isinstance(getattr(src, "signature", None), dict) else []
    names = [arg_names[k] if isinstance(k, int) and k < len(arg_names) else str(k) for k in keys]
    constants = {}
    for k, v in (getattr(src, "constants", None) or {}).items():
        i = k[0] if isinstance(k, tuple) else k
        constants[arg_names[i] if isinstance(i, int) and i < len(arg_names) else str(i)] = v
    return (
        getattr(src, "name", None) or getattr(metadata, "name", ""),
        names,
        constant_items(constants),
        getattr(metadata, "num_stages", None),
    )


def _static_names(kernel) -> list[str]:
    """The launch arguments of an Inductor static kernel: its arguments less its constants."""
    names = getattr(kernel, "_maya_names", None)
    if names is None:
        constants = set(getattr(kernel, "full_constexprs", ()))
        names = kernel._maya_names = [n for i, n in enumerate(kernel.arg_names) if i not in constants]
    return names


def _wrap_static_launcher(module: ModuleType, notes: LaunchNotes) -> None:
    cls = module.StaticallyLaunchedTritonKernel
    run = cls.run

    def run_described(self, grid_x, grid_y, grid_z, stream, *args):
        notes.launch(
            self.name,
            _static_names(self),
            args,
            getattr(self, "_maya_constants", ()),
            getattr(self, "_maya_stages", None),
        )
        return run(self, grid_x, grid_y, grid_z, stream, *args)

    cls.run = run_described


def _config_constants(result) -> dict[str, Any]:
    """The constexprs of an Inductor compile result: its compile constants, a template's config (`config_args`,
    which the template's code holds as constants, not arguments) and the autotuning config's kwargs."""
    return {
        **(result.compile_meta.get("constants") or {}),
        **(result.inductor_meta.get("config_args") or {}),
        **result.config.kwargs,
    }


def _wrap_inductor(module: ModuleType, notes: LaunchNotes) -> None:
    """Inductor's kernels learn their config's constexprs (`XBLOCK`, a template's `BLOCK_M`, ...) when their
    launcher is made; and Inductor swaps a static kernel's launcher for a C one (`_FastCudaLauncher`) after its
    first launch: the swapped-in runner is described as the static kernel it stands for."""
    static = getattr(module, "StaticTritonCompileResult", None)
    if static is not None:
        make_static = static.make_launcher

        def make_static_launcher(self):
            launcher = make_static(self)
            try:
                self.kernel._maya_constants = constant_items(_config_constants(self))
                self.kernel._maya_stages = self.config.num_stages
            except Exception:  # described without its constants
                pass
            return launcher

        static.make_launcher = make_static_launcher
    compiled = getattr(module, "TritonCompileResult", None)
    if compiled is not None:
        make_triton = compiled.make_launcher

        def make_triton_launcher(self):
            launcher = make_triton(self)
            try:
                runner = self.kernel.run  # Triton's CudaLauncher of this kernel
                kernel, names, constants, *rest = runner._maya_launch
                runner._maya_launch = (
                    kernel,
                    names,
                    constant_items({**dict(constants), **_config_constants(self)}),
                    *rest,
                )
            except Exception:  # described with Triton's own constants
                pass
            return launcher

        compiled.make_launcher = make_triton_launcher
    cls = module.CachingAutotuner
    precompile = getattr(cls, "_precompile_config", None)
    if precompile is not None:

        def precompile_named(self, *args, **kwargs):
            result = precompile(self, *args, **kwargs)
            _name_placeholder(result, getattr(self, "inductor_meta", {}).get("kernel_name"))
            return result

        cls._precompile_config = precompile_named
    build = getattr(cls, "_build_fast_launcher", None)
    if build is None:
        return

    def build_described(self, launcher):
        fast = build(self, launcher)
        kernel = getattr(getattr(launcher, "__globals__", {}).get("runner"), "__self__", None)
        runner = getattr(fast, "__globals__", {}).get("runner")
        if fast is None or kernel is None or runner is None or not hasattr(kernel, "arg_names"):
            return fast
        name, names = kernel.name, _static_names(kernel)
        constants, stages = getattr(kernel, "_maya_constants", ()), getattr(kernel, "_maya_stages", None)

        def runner_described(grid_x, grid_y, grid_z, stream, *args):
            notes.launch(name, names, args, constants, stages)
            return runner(grid_x, grid_y, grid_z, stream, *args)

        fast.__globals__["runner"] = runner_described
        return fast

    cls._build_fast_launcher = build_described


def _name_placeholder(result: Any, name: str | None) -> None:
    """Give the launches of a kernel Inductor compiled under `INDUCTOR_PLACEHOLDER` (torch 2.5's default) its own
    name, `name`: a config's compile result is `(CompiledKernel, launcher)` (torch 2.5, 2.6) or holds the kernel
    (`TritonCompileResult.kernel`); the kernel's `run` is Triton's launcher, described when it was made (read
    from the instance: Triton's `CompiledKernel` loads its module onto the device when `run` is looked up, which
    a result compiled only to warm the cache must not do). Without it, every generated kernel's launch says only
    `triton_`, and its kind (pointwise, reduction) is lost."""
    try:
        kernel = result[0] if isinstance(result, tuple) else getattr(result, "kernel", None)
        runner = getattr(kernel, "__dict__", {}).get("run")
        described = getattr(runner, "_maya_launch", None)
        if described is None or not name or described[0] != INDUCTOR_PLACEHOLDER or name == INDUCTOR_PLACEHOLDER:
            return
        runner._maya_launch = (*described[:4], name)
    except Exception:  # a result this code does not know: described under the placeholder
        pass


class AfterImport(importlib.abc.MetaPathFinder):
    """Runs a function on a module right after its first import."""

    def __init__(self, hooks: dict[str, Callable[[ModuleType], None]]):
        self.hooks = hooks

    def find_spec(self, name, path, target=None):
        hook = self.hooks.get(name)
        if hook is None:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None and spec.loader is not None:
                break
        else:
            return None
        loader, hooks = spec.loader, self.hooks
        exec_module = loader.exec_module

        def exec_and_hook(module):
            exec_module(module)
            hooks.pop(name, None)
            hook(module)

        loader.exec_module = exec_and_hook  # the module's own loader instance
        return spec


def install(out: Path) -> LaunchNotes:
    """Describe every Triton launch of this process from now on (the launchers are wrapped at once if already
    imported, else right after their import)."""
    native = ctypes.CDLL(None).maya_emu_launch_note
    native.argtypes = [ctypes.c_int64]
    notes = LaunchNotes(out, native)
    hooks: dict[str, Callable[[ModuleType], None]] = {
        TRITON_LAUNCHER: lambda m: _wrap_triton_launcher(m, notes),
        TRITON_BACKENDS: lambda m: _wrap_backend_launchers(m, notes),
        STATIC_LAUNCHER: lambda m: _wrap_static_launcher(m, notes),
        INDUCTOR_HEURISTICS: lambda m: _wrap_inductor(m, notes),
    }
    for name in list(hooks):
        if name in sys.modules:
            hooks.pop(name)(sys.modules[name])
    if hooks:
        sys.meta_path.insert(0, AfterImport(hooks))
    return notes
