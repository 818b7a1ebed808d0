"""The architecture holds: the stages are layers (import-linter contracts in pyproject.toml), and the
vocabulary is the only home of the names every stage shares."""

import ast
import graphlib
import importlib
import os
import re
import shutil
import subprocess
import sys

import grimp
import pytest
from paths import REPO, SRC


@pytest.mark.slow
def test_import_layers_hold():
    """`lint-imports` over the checkout's src/: a lower stage never imports a higher one, and
    maya_trace_spec imports nothing of maya."""
    lint = shutil.which("lint-imports", path=os.path.dirname(sys.executable))
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    out = subprocess.run([lint, "--no-cache"], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "0 broken" in out.stdout


def test_shared_vocabulary_is_not_copied():
    """Kernel-family, dtype-size and collective-name tables are defined in maya_trace_spec.vocabulary only."""
    definitions = re.compile(
        r"^\s*_?(DTYPE_BYTES|KERNEL_FAMILIES|MATRIX_FAMILIES|COLLECTIVES|NCCL_API_COLLECTIVES)"
        r"(\s*:\s*[^=]+)?\s*=",
        re.M,
    )
    copies = [
        str(p.relative_to(SRC))
        for p in SRC.rglob("*.py")
        if definitions.search(p.read_text()) and p.name != "vocabulary.py"
    ]
    assert copies == []
    spellings = re.compile(r'("c10::(?i:bfloat16)"|"ncclAllReduce"|"all_reduce")\s*:|:\s*"ncclAllReduce"|"maya::eval"')
    copies = [
        str(p.relative_to(SRC))
        for p in SRC.rglob("*.py")
        if spellings.search(p.read_text()) and p.name != "vocabulary.py"
    ]
    assert copies == []


def test_no_runtime_import_cycle():
    """No module imports itself back at run time, lazily (inside a function) or not; imports only for type
    hints (under TYPE_CHECKING) are left out."""
    sys.path.insert(0, str(SRC))
    try:
        graph = grimp.build_graph("maya", "maya_trace_spec", exclude_type_checking_imports=True, cache_dir=None)
    finally:
        sys.path.remove(str(SRC))
    imports = {module: graph.find_modules_directly_imported_by(module) for module in graph.modules}
    assert "maya.emulator.capture_format" in imports["maya.emulator.convert"]  # the scan sees the package
    try:
        graphlib.TopologicalSorter(imports).prepare()
    except graphlib.CycleError as cycle:
        raise AssertionError(f"import cycle: {' -> '.join(cycle.args[1])}") from None


DRIVERS = ("cli", "search", "validation", "pipelines")
"""Packages that drive the stages: they capture, predict and record through `maya.api` only."""
STAGE_MODULES = {"maya.emulator.launcher", "maya.simulator.predict", "maya.simulator.store"}
STAGE_NAMES = {"maya.emulator": {"emulate"}}


def runnable(module: str, name: str) -> bool:
    """Whether `name` of the simulator's `module` is something a driver could run (a function, a duration
    provider, a loader): anything callable but an exception. Its constants and exceptions are a driver's to use."""
    value = getattr(importlib.import_module(module), name, None)
    return callable(value) and not (isinstance(value, type) and issubclass(value, BaseException))


def stage_imports(source: str) -> list[str]:
    """The imports in `source` that reach past `maya.api` into a stage: the emulator's launcher, the predictions
    store, or anything of the simulator's a driver could run."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name in STAGE_MODULES or a.name.startswith("maya.simulator")]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            if node.module in STAGE_MODULES:
                found.append(node.module)
            reached = {f"{node.module}.{a.name}" for a in node.names}
            named = {f"{node.module}.{n}" for n in STAGE_NAMES.get(node.module, ())}
            if node.module.split(".")[:2] == ["maya", "simulator"]:
                named |= {f"{node.module}.{a.name}" for a in node.names if runnable(node.module, a.name)}
            found += sorted(reached & (named | STAGE_MODULES))
    return found


def test_stage_imports_are_found():
    """The scan sees each way a driver could reach a stage (so the test below can fail), the simulator's
    functions the NeuSight suite once composed itself included; the simulator's exceptions and constants pass."""
    source = (
        "import maya.emulator.launcher\n"
        "from maya.emulator.launcher import Topology\n"
        "from maya.emulator import emulate\n"
        "def f():\n    from maya.simulator import predict, Deadlock\n"
        "from maya.simulator import store\n"
        "from maya.api import predict\n"
        "from maya.simulator import EstimatorDurations, simulate, summarize\n"
        "from maya.simulator.band import iteration_band\n"
        "from maya.simulator.trace import load\n"
        "from maya.simulator.opcodes import RECORD\n"
        "from maya.simulator.oom import RecordedOutOfMemory\n"
    )
    assert sorted(stage_imports(source)) == [
        "maya.emulator.emulate",
        "maya.emulator.launcher",
        "maya.emulator.launcher",
        "maya.simulator.EstimatorDurations",
        "maya.simulator.band.iteration_band",
        "maya.simulator.predict",
        "maya.simulator.simulate",
        "maya.simulator.store",
        "maya.simulator.summarize",
        "maya.simulator.trace.load",
    ]


def test_no_driver_composes_the_stages_itself():
    """The CLI, search, validation and the pipelines capture, predict and record through `maya.api`: none imports
    the launcher, the predictions store or anything of the simulator's it could run (`simulate`, `summarize`,
    `predict`, a duration provider)."""
    found = {
        str(p.relative_to(SRC)): hits
        for package in DRIVERS
        for p in sorted((SRC / "maya" / package).rglob("*.py"))
        if (hits := stage_imports(p.read_text()))
    }
    assert found == {}


@pytest.mark.slow
def test_import_maya_does_not_import_torch():
    """`import maya` is light (the API is imported on first use), and `maya.open_run` and friends resolve."""
    code = (
        "import sys, maya\n"
        "assert 'torch' not in sys.modules and 'maya.api' not in sys.modules, sorted(sys.modules)\n"
        "from maya.api import open_run\n"
        "assert maya.open_run is open_run and maya.PredictOptions().durations == 'auto'\n"
        "assert 'torch' not in sys.modules\n"
        "import maya.emulator\n"
        "assert 'maya.emulator.launcher' not in sys.modules\n"
        "assert maya.emulator.emulate.__module__ == 'maya.emulator.launcher'\n"
    )
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
