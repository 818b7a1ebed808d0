"""Launch descriptions (`maya.emulator.triton_launches`) without a GPU: keys, files and Inductor's wrappers."""

import json
from types import SimpleNamespace

import torch

from maya.emulator import triton_launches
from maya.emulator.triton_launches import NOTES_FILE, LaunchNotes


def notes(tmp_path):
    told = []
    return LaunchNotes(tmp_path, told.append), told


def test_distinct_launches_are_written_once_and_noted_by_id(tmp_path):
    n, told = notes(tmp_path)
    x, y = torch.empty(4, 8, dtype=torch.bfloat16), torch.empty(16)
    n.launch("k", ["in_ptr0", "xnumel"], (x, 32), (("XBLOCK", 64),), 3)
    n.launch("k", ["in_ptr0", "xnumel"], (torch.empty(4, 8, dtype=torch.bfloat16), 32), (("XBLOCK", 64),), 3)
    n.launch("k", ["in_ptr0", "xnumel"], (x, 32), (("XBLOCK", 128),), 3)  # another config of the kernel
    n.launch("k", ["in_ptr0", "xnumel"], (y, 16), (("XBLOCK", 64),), 3)
    assert told == [1, 1, 2, 3]
    entries = [json.loads(line) for line in (tmp_path / NOTES_FILE).read_text().splitlines()]
    assert entries[0] == {
        "id": 1,
        "kernel": "k",
        "constexprs": {"XBLOCK": 64},
        "num_stages": 3,
        "args": [
            {"name": "in_ptr0", "dtype": "bfloat16", "shape": [4, 8], "bytes": 64},
            {"name": "xnumel", "value": 32},
        ],
    }
    assert [e["id"] for e in entries] == [1, 2, 3]


def test_an_argument_that_cannot_be_described_leaves_the_launch_undescribed(tmp_path):
    class Odd:
        @property
        def base(self):
            raise RuntimeError("no base")

    n, told = notes(tmp_path)
    n.launch("k", ["a"], ([1, 2],))
    assert told == [1]  # described by its type name
    n.launch("k", ["a"], (Odd(),))
    assert told == [1, 0]  # the launch goes on, undescribed


def test_inductor_results_describe_their_config_and_template_constants(tmp_path):
    class StaticTritonCompileResult:
        def __init__(self):
            self.kernel = SimpleNamespace(
                name="triton_mm", arg_names=["arg_A", "arg_B", "out_ptr0"], full_constexprs=[]
            )
            self.compile_meta = {"constants": {"EVEN_K": True}}
            self.inductor_meta = {"config_args": {"BLOCK_M": 64, "BLOCK_N": 32, "ACC_TYPE": "tl.float32"}}
            self.config = SimpleNamespace(kwargs={}, num_stages=4)

        def make_launcher(self):
            return "launcher"

    class TritonCompileResult(StaticTritonCompileResult):
        pass

    class CachingAutotuner:
        pass

    module = SimpleNamespace(
        StaticTritonCompileResult=StaticTritonCompileResult,
        TritonCompileResult=TritonCompileResult,
        CachingAutotuner=CachingAutotuner,
    )
    n, _ = notes(tmp_path)
    triton_launches._wrap_inductor(module, n)
    static = StaticTritonCompileResult()
    assert static.make_launcher() == "launcher"
    assert dict(static.kernel._maya_constants) == {"EVEN_K": True, "BLOCK_M": 64, "BLOCK_N": 32}
    assert static.kernel._maya_stages == 4
    dynamic = TritonCompileResult()
    dynamic.kernel.run = SimpleNamespace(_maya_launch=("triton_mm", ["arg_A"], (("XBLOCK", 8),), 4))
    dynamic.make_launcher()
    assert dict(dynamic.kernel.run._maya_launch[2]) == {"XBLOCK": 8, "EVEN_K": True, "BLOCK_M": 64, "BLOCK_N": 32}


def test_launches_of_one_placeholder_name_are_told_apart_by_inductors_names(tmp_path):
    n, told = notes(tmp_path)
    x = torch.empty(4, 8)
    n.launch("triton_", ["in_ptr0", "xnumel"], (x, 32), (), 1, "triton_poi_fused_add_0")
    n.launch("triton_", ["in_ptr0", "xnumel"], (x, 32), (), 1, "triton_poi_fused_mul_1")  # same arguments
    n.launch("triton_", ["in_ptr0", "xnumel"], (x, 32), (), 1, "triton_poi_fused_add_0")
    assert told == [1, 2, 1]
    entries = [json.loads(line) for line in (tmp_path / NOTES_FILE).read_text().splitlines()]
    assert [(e["kernel"], e["name"]) for e in entries] == [
        ("triton_", "triton_poi_fused_add_0"),
        ("triton_", "triton_poi_fused_mul_1"),
    ]


def test_inductor_names_the_launcher_of_a_kernel_compiled_under_its_placeholder(tmp_path):
    """torch 2.5's `_precompile_config` returns (CompiledKernel, launcher); the kernel's Triton launcher (described
    as `triton_`) takes the autotuner's `kernel_name`, read without `run`'s lookup (which loads the module)."""

    class CompiledKernel:
        def __init__(self, name):
            self.run = SimpleNamespace(_maya_launch=(name, ["in_ptr0"], (("XBLOCK", 8),), 1))

        def __getattribute__(self, attr):
            if attr == "run":
                raise AssertionError("looking up run loads the kernel onto the device")
            return super().__getattribute__(attr)

    class CachingAutotuner:
        def __init__(self, name, compiled):
            self.inductor_meta = {"kernel_name": name}
            self.compiled = compiled

        def _precompile_config(self, cfg, warm_cache_only):
            return self.compiled, None if warm_cache_only else "launcher"

    n, _ = notes(tmp_path)
    triton_launches._wrap_inductor(SimpleNamespace(CachingAutotuner=CachingAutotuner), n)
    placeholder = CompiledKernel("triton_")
    assert CachingAutotuner("triton_poi_fused_add_0", placeholder)._precompile_config("cfg", False)[1] == "launcher"
    assert vars(placeholder)["run"]._maya_launch == (
        "triton_",
        ["in_ptr0"],
        (("XBLOCK", 8),),
        1,
        "triton_poi_fused_add_0",
    )
    named = CompiledKernel("triton_poi_fused_mul_1")  # torch 2.6+: the kernel has its own name already
    CachingAutotuner("triton_poi_fused_mul_1", named)._precompile_config("cfg", False)
    assert len(vars(named)["run"]._maya_launch) == 4


def test_two_kernels_of_one_name_with_different_access_or_dot_are_described_apart(tmp_path):
    """User kernels of the same name in two modules (`_kernel`): each launch carries its own kernel's `access`."""
    n, told = notes(tmp_path)
    x = torch.empty(8)
    n.launch("_kernel", ["x_ptr"], (x,), access={"x_ptr": "read"})
    n.launch("_kernel", ["x_ptr"], (x,), access={"x_ptr": "read-write"})
    n.launch("_kernel", ["x_ptr"], (x,), access={"x_ptr": "read-write"}, dot=True)
    n.launch("_kernel", ["x_ptr"], (x,), access={"x_ptr": "read"})
    assert told == [1, 2, 3, 1]
    entries = [json.loads(line) for line in (tmp_path / NOTES_FILE).read_text().splitlines()]
    assert [(e["args"][0]["access"], e.get("dot")) for e in entries] == [
        ("read", None),
        ("read-write", None),
        ("read-write", True),
    ]
