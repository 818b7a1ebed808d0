"""The architecture holds: the stages are layers (import-linter contracts in pyproject.toml), and the
vocabulary is the only home of the names every stage shares."""

import os
import re
import shutil
import subprocess
import sys

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
    spellings = re.compile(r'("c10::(?i:bfloat16)"|"ncclAllReduce"|"all_reduce")\s*:|:\s*"ncclAllReduce"')
    copies = [
        str(p.relative_to(SRC))
        for p in SRC.rglob("*.py")
        if spellings.search(p.read_text()) and p.name != "vocabulary.py"
    ]
    assert copies == []
