"""The architecture holds: the stages are layers (import-linter contracts in pyproject.toml), and the
vocabulary is the only home of the names every stage shares."""

import graphlib
import os
import re
import shutil
import subprocess
import sys

import grimp
from paths import REPO, SRC


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
