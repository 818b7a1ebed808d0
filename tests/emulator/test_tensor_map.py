"""TMA descriptors (cuTensorMapEncodeTiled): emulated, argument checks as the CUDA
driver API documents them, a deterministic map, recorded like every driver call."""

import json

import pyarrow.compute as pc
import pytest
from paths import WORKLOADS
from typer.testing import CliRunner

from maya.cli import app
from maya_trace_spec import Run

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

INVALID_VALUE = 1
CASES = [
    "rank0",
    "rank6",
    "misaligned_address",
    "interleave32_address",
    "stride_not_16",
    "stride_2_40",
    "box_0",
    "box_257",
    "elem_stride_9",
    "dtype_16",
    "swizzle_7",
    "interleave_3",
    "l2_4",
    "oob_2",
    "oob_nan_integer",
    "box_exceeds_swizzle",
    "map_misaligned",
]


def test_tensor_maps_are_encoded_and_bad_arguments_rejected(tmp_path):
    out = tmp_path / "run"
    r = CliRunner().invoke(app, ["emulate", "--out", str(out), "--", "python", str(WORKLOADS / "tensor_map.py")])
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert "valid 0" in lines
    words = next(line for line in lines if line.startswith("map ")).split()[1:]
    q = [int(w) for w in words]
    bf16, rank = 9, 2
    assert q[2] & 0xFF == bf16 and q[2] >> 8 & 0xFF == rank and q[2] >> 24 & 0xFF == 3  # swizzle 128B
    assert q[3:5] == [512, 256] and q[8] == 1024  # dims (innermost first), row stride in bytes
    assert (q[12] & 0xFFFF, q[12] >> 16 & 0xFFFF) == (64, 128) and q[14] == 2  # box, bf16 bytes
    for case in CASES:  # each breaks one documented requirement: the driver's answer and a line naming it
        assert f"case {case} {INVALID_VALUE}" in lines, case
    assert "cuTensorMapEncodeTiled: CUDA_ERROR_INVALID_VALUE: boxDim[1] = 257 is not in 1..256" in r.output
    calls = Run(out).table("api_calls")
    encodes = calls.filter(pc.equal(calls.column("api"), "cuTensorMapEncodeTiled")).to_pylist()
    assert len(encodes) == 1 + len(CASES)
    assert sorted(c["status"] for c in encodes) == [0] + [INVALID_VALUE] * len(CASES)
    assert "unimplemented CUDA API" not in r.output


def test_triton_kernel_taking_descriptors_by_value_keeps_their_bytes(tmp_path):
    """Triton's launcher encodes a host `TensorDescriptor` per argument; the launch's description sizes each by
    the tensor behind it, so the kernel's traffic is known although it takes no pointer."""
    out = tmp_path / "run"
    r = CliRunner().invoke(app, ["emulate", "--out", str(out), "--", "python", str(WORKLOADS / "triton_tma.py")])
    assert r.exit_code == 0, r.output
    assert "triton tma ok" in r.output and "unimplemented CUDA API" not in r.output
    calls = Run(out).table("api_calls")
    assert calls.filter(pc.equal(calls.column("api"), "cuTensorMapEncodeTiled")).column("status").to_pylist() == [0, 0]
    launch = calls.filter(pc.equal(calls.column("api"), "cuLaunchKernel")).column("args").to_pylist()
    args = json.loads(launch[0])["triton"]["args"]
    assert [(a["name"], a.get("bytes")) for a in args[:2]] == [
        ("in_desc", 1024 * 2048 * 2),
        ("out_desc", 1024 * 2048 * 2),
    ]
