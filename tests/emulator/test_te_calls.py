"""Transformer Engine's extension calls recorded as `te::` ops with their tensors' shapes (`emulator/te_calls.py`), on
a stand-in extension module: each public function runs inside a range whose inputs are its tensor arguments (a TE
tensor storage by its data tensor, a list of tensors as `TensorList`), the range closes when the function raises,
classes are left alone, and TE's own loader (`load_framework_extension`) gets the extension wrapped once loaded."""

import json
import math
import sys
from types import ModuleType, SimpleNamespace

import pytest
import torch

from maya.emulator import te_calls


class FakeLib:
    """The op observer's entry points, recording what they are called with."""

    def __init__(self):
        self.strings: list[str] = []
        self.events: list[tuple] = []
        self.maya_ops_range_enter_inputs = self.enter
        self.maya_ops_range_exit = lambda op: self.events.append(("exit", op))
        self.maya_ops_intern = self.intern

    def intern(self, text: bytes) -> int:
        if text.decode() not in self.strings:
            self.strings.append(text.decode())
        return self.strings.index(text.decode())

    def enter(self, name: int, inputs: int) -> int:
        self.events.append(("enter", self.strings[name], json.loads(self.strings[inputs])))
        return len(self.events)


def extension() -> ModuleType:
    module = ModuleType(te_calls.TE_EXTENSION)
    module.hypot = math.hypot  # a builtin function, as pybind11's are
    module.fsum = math.fsum
    module.DType = type("DType", (), {})
    return module


def test_each_function_runs_inside_a_range_with_its_tensors_shapes():
    lib, module = FakeLib(), extension()
    dtype_class = module.DType
    te_calls._wrap_extension(module, lib)
    storage = SimpleNamespace(_data=torch.zeros(8, 4, dtype=torch.uint8))
    with pytest.raises((TypeError, ValueError)):  # math.hypot takes no tensors of several elements
        module.hypot(torch.zeros(2, 3, dtype=torch.bfloat16), storage, [torch.zeros(1)], [[torch.zeros(1)]], 0.5)
    assert lib.events == [
        (
            "enter",
            "te::hypot",
            {"s": [[2, 3], [8, 4], [], [], []], "t": ["bfloat16", "uint8", "TensorList", "TensorList", ""]},
        ),
        ("exit", 1),
    ]
    assert module.fsum([1.0, 2.0]) == 3.0
    assert lib.events[-2][1] == "te::fsum" and lib.events[-1][0] == "exit"
    assert module.DType is dtype_class and module.hypot.__name__ == "hypot"


def test_te_loader_gets_the_extension_wrapped_once_loaded(monkeypatch):
    lib = FakeLib()
    lib.maya_ops_range_enter_inputs = SimpleNamespace(argtypes=None, restype=None, __call__=lib.enter)
    loaded = extension()
    loader = ModuleType(te_calls.TE_LOADER)
    loader.load_framework_extension = lambda framework: sys.modules.__setitem__(te_calls.TE_EXTENSION, loaded)
    monkeypatch.delitem(sys.modules, te_calls.TE_EXTENSION, raising=False)
    monkeypatch.setitem(sys.modules, te_calls.TE_LOADER, loader)
    monkeypatch.setattr(te_calls, "_wrap_extension", lambda module, lib: setattr(module, te_calls.WRAPPED, True))
    te_calls.install(lib)
    assert not hasattr(loaded, te_calls.WRAPPED)
    loader.load_framework_extension("torch")
    assert getattr(sys.modules[te_calls.TE_EXTENSION], te_calls.WRAPPED) is True
