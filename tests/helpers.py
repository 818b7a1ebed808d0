"""Helpers the tests share (fixtures stay in conftest.py)."""

import hashlib
import importlib.util
from pathlib import Path
from types import ModuleType

from paths import REPO


def tree_digest(root: Path) -> dict[str, str]:
    """Relative path -> content hash of every file under `root` (to prove nothing changed)."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def benchmark_module(name: str) -> ModuleType:
    """The script `benchmarks/<name>.py` loaded as a module (benchmarks are scripts, not a package)."""
    spec = importlib.util.spec_from_file_location(f"maya_benchmark_{name}", REPO / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def version_row(version: str, artifact_path: str, artifact_sha256: str, artifact_bytes: int) -> dict:
    """An `estimator_versions` row as the registry writes it (one GEMM family on the H100), for tests that register a
    version by hand."""
    return {
        "version": version,
        "created_at": "2026-11-29 00:00:00",
        "data_hash": "d",
        "config_hash": "c",
        "hardware": ["h100-sxm"],
        "families": ["gemm"],
        "training_rows": 1,
        "metrics": "{}",
        "artifact_path": artifact_path,
        "artifact_sha256": artifact_sha256,
        "artifact_bytes": artifact_bytes,
        "maya_version": "0",
    }


def overlapped_steps(
    path: Path, collectives: list[tuple[str, str, int]], *, nelems: int, gemms: int, size: int
) -> Path:
    """A two-rank run of three steps, each: the `collectives` ((kind, communicator, stream) of `nelems` elements,
    every communicator joining both ranks), then `gemms` bf16 GEMMs of `size`^3 on the compute stream beside them,
    then a device sync; written to `path`."""
    from maya.simulator.trace_builder import TraceBuilder

    b = TraceBuilder(2)
    for comm in dict.fromkeys(comm for _, comm, _ in collectives):
        b.communicator(comm, [0, 1])
    for r in (0, 1):
        k = b.rank(r)
        for step in range(3):
            k.iteration = step
            for kind, comm, stream in collectives:
                k.collective(kind, comm, 0, stream=stream, nelems=nelems)
            for _ in range(gemms):
                k.gemm(size, size, size, 0)
            k.device_sync()
    return b.write(path)
