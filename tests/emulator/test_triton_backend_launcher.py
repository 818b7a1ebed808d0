"""Triton 3.3 (torch 2.7) loads its backends' drivers outside `sys.modules`: their launcher is still described, a user
kernel's launch with its `access`."""

from types import SimpleNamespace

from maya.emulator.triton_launches import _wrap_backend_launchers


class CudaLauncher:
    """A backend's launcher as Triton 3.3 defines it (`triton/backends/nvidia/driver.py`)."""

    def __init__(self, src, metadata):
        self.launched = []

    def __call__(self, gridX, gridY, gridZ, stream, function, *args):
        self.launched.append(args)


class CudaDriver:
    """The backend's driver class: its module (this one here) holds the launcher class it instantiates."""

    def __init__(self):
        self.launcher_cls = CudaLauncher


GELU = """def triton_poi_fused_gelu_0(in_ptr0, out_ptr0, xnumel, XBLOCK: tl.constexpr):
    x = tl.arange(0, XBLOCK)
    tl.store(out_ptr0 + x, tl.load(in_ptr0 + x))
"""


SCALE = """def scale(x_ptr, y_ptr, n):
    o = tl.arange(0, 1024)
    tl.store(y_ptr + o, tl.load(x_ptr + o, mask=o < n) * 2)
"""


class Notes:
    def __init__(self):
        self.launches = []

    def launch(self, kernel, names, args, constants=(), num_stages=None, access=None, dot=False):
        self.launches.append((kernel, names, args, constants, num_stages))
        self.access, self.dot = access, dot


def test_the_launcher_of_a_backend_loaded_outside_sys_modules_is_described():
    src = SimpleNamespace(
        name="triton_poi_fused_gelu_0",
        fn=SimpleNamespace(arg_names=["in_ptr0", "out_ptr0", "xnumel", "XBLOCK"], src=GELU),
        signature={"in_ptr0": "*fp32", "out_ptr0": "*fp32", "xnumel": "i32", "XBLOCK": "constexpr"},
        constants={(3,): 256},
    )
    backends = SimpleNamespace(backends={"nvidia": SimpleNamespace(compiler=object, driver=CudaDriver)})
    notes = Notes()
    _wrap_backend_launchers(backends, notes)
    _wrap_backend_launchers(backends, notes)  # reached twice (as a module too): wrapped once
    launcher = CudaDriver().launcher_cls(src, SimpleNamespace(num_stages=1))
    launcher(1, 1, 1, 0, "function", "metadata", None, None, None, "x", "y", 32768, 256)
    assert notes.launches == [
        (
            "triton_poi_fused_gelu_0",
            ["in_ptr0", "out_ptr0", "xnumel", "XBLOCK"],
            ("x", "y", 32768, 256),
            (("XBLOCK", 256),),
            1,
        )
    ]
    assert launcher.launched == [("metadata", None, None, None, "x", "y", 32768, 256)]
    assert notes.access is None  # Inductor's kernel: its source is not read (its arguments' names say their roles)
    user = SimpleNamespace(
        name="scale",
        fn=SimpleNamespace(arg_names=["x_ptr", "y_ptr", "n"], src=SCALE),
        signature={"x_ptr": "*fp32", "y_ptr": "*fp32", "n": "i32"},
        constants={},
    )
    launcher = CudaDriver().launcher_cls(user, SimpleNamespace(num_stages=1))
    launcher(1, 1, 1, 0, "function", "metadata", None, None, None, "x", "y", 4096)
    assert notes.launches[-1][0] == "scale"  # a user kernel: its access read from its source
    assert (notes.access, notes.dot) == ({"x_ptr": "read", "y_ptr": "write"}, False)
