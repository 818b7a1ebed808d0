"""Transformer Engine's extension calls as ops of the trace, with the shapes of their tensor arguments.

Runs inside each emulated rank. TE's kernels (its LayerNorm/RMSNorm, casts and transposes, activations, amax and
scale updates, softmax) are launched by the functions of its PyTorch extension, `transformer_engine_torch`, which
are not dispatcher ops: no RecordFunction encloses them, so their kernels would carry neither sizes nor a framework
op. Right after TE loads the extension (before its Python code binds the functions), each function is wrapped
to open a range named `te::<function>` (`vocabulary.TE_CALL_PREFIX`) whose inputs are its tensor arguments' shapes
and dtypes, in the op observer's signature form; the simulator prices the kernels inside from them
(`simulator/te_work.py`). A quantized tensor that is not a `torch.Tensor` (TE's tensor storages) is described by
its data tensor; a list of tensors (or of lists of them) as the observer describes one (`TensorList`, no shape).
"""

from __future__ import annotations

import ctypes
import functools
import json
import sys
import threading
from collections.abc import Callable
from types import BuiltinFunctionType, ModuleType
from typing import Any

from maya_trace_spec.vocabulary import TE_CALL_PREFIX

from .triton_launches import AfterImport

TE_EXTENSION = "transformer_engine_torch"
TE_LOADER = "transformer_engine.common"
"""The module whose `load_framework_extension` loads the extension."""
WRAPPED = "_maya_te_calls"
"""Set on the extension module once its functions are wrapped."""
DATA_ATTRIBUTES = ("_data", "_rowwise_data", "_columnwise_data")
"""Where TE's tensor storages (`Float8TensorStorage`, `MXFP8TensorStorage`, ...) keep their data tensor."""


class _Signatures:
    """Interned input signatures of TE calls, by their arguments' shapes and dtypes."""

    def __init__(self, intern: Callable[[bytes], int], tensor: type):
        self._intern, self._tensor = intern, tensor
        self._ids: dict[tuple, int] = {}
        self._lock = threading.Lock()

    def _tensor_of(self, a: Any):
        if isinstance(a, self._tensor):
            return a
        for name in DATA_ATTRIBUTES:
            data = getattr(a, name, None)
            if isinstance(data, self._tensor):
                return data
        return None

    def _tensor_list(self, a: Any) -> bool:
        """A list of tensors, or of lists of them (TE's multi-tensor functions take one list per role)."""
        if not isinstance(a, (list, tuple)) or not a:
            return False
        first = a[0]
        return self._tensor_of(first) is not None or self._tensor_list(first)

    def of(self, name: int, args: tuple, kwargs: dict) -> int:
        key = [name]
        for a in (*args, *kwargs.values()):
            t = self._tensor_of(a)
            key.append((tuple(t.shape), t.dtype) if t is not None else "TensorList" if self._tensor_list(a) else None)
        key = tuple(key)
        found = self._ids.get(key)
        if found is not None:
            return found
        shapes = [list(k[0]) if isinstance(k, tuple) else [] for k in key[1:]]
        types = [str(k[1]).removeprefix("torch.") if isinstance(k, tuple) else k or "" for k in key[1:]]
        text = json.dumps({"s": shapes, "t": types}, separators=(",", ":"))
        with self._lock:
            return self._ids.setdefault(key, self._intern(text.encode()))


def _wrap_extension(module: ModuleType, lib: ctypes.CDLL) -> None:
    """Replace each function of the extension by one that runs it inside a `te::<name>` range."""
    import torch

    enter, leave, intern = lib.maya_ops_range_enter_inputs, lib.maya_ops_range_exit, lib.maya_ops_intern
    signatures = _Signatures(intern, torch.Tensor)

    def described(fn: BuiltinFunctionType, name: int) -> Callable:
        @functools.wraps(fn)
        def call(*args, **kwargs):
            op = enter(name, signatures.of(name, args, kwargs))
            try:
                return fn(*args, **kwargs)
            finally:
                leave(op)

        return call

    for attr, fn in list(vars(module).items()):
        if isinstance(fn, BuiltinFunctionType) and not attr.startswith("_"):
            setattr(module, attr, described(fn, intern(f"{TE_CALL_PREFIX}{attr}".encode())))
    setattr(module, WRAPPED, True)


def _wrap_loader(module: ModuleType, lib: ctypes.CDLL) -> None:
    """TE loads its extension by file (`transformer_engine.common.load_framework_extension`: a spec from the
    file, put in `sys.modules` by hand), not through the import system: wrap it once that has run."""
    load = module.load_framework_extension

    @functools.wraps(load)
    def load_and_wrap(framework: str) -> None:
        load(framework)
        extension = sys.modules.get(TE_EXTENSION)
        if extension is not None and not getattr(extension, WRAPPED, False):
            _wrap_extension(extension, lib)

    module.load_framework_extension = load_and_wrap


def install(lib: ctypes.CDLL) -> None:
    """Describe Transformer Engine's extension calls of this process from now on (`lib`: the op observer's
    library), wrapping the extension at once if already loaded, else right after TE loads it."""
    lib.maya_ops_range_enter_inputs.argtypes = [ctypes.c_int32, ctypes.c_int32]
    lib.maya_ops_range_enter_inputs.restype = ctypes.c_int64
    if TE_EXTENSION in sys.modules:
        _wrap_extension(sys.modules[TE_EXTENSION], lib)
    elif TE_LOADER in sys.modules:
        _wrap_loader(sys.modules[TE_LOADER], lib)
    else:
        sys.meta_path.insert(0, AfterImport({TE_LOADER: lambda m: _wrap_loader(m, lib)}))
