"""Packaging: every package lives under src/ with its import name as its folder, the spec core stays
dependency-light, editable and non-editable installs find every package and the shipped data."""

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from paths import REPO, SRC

STAGES = ("core", "emulator", "profiler", "estimators", "simulator", "search", "pipelines", "cli")


def test_stages_are_packages_named_as_their_folders():
    """In the checkout and in whatever install the tests run against, each stage is `maya/<stage>/`."""
    import maya

    root = Path(maya.__file__).parent
    for stage in STAGES:
        assert (SRC / "maya" / stage / "__init__.py").is_file()
        module = __import__(f"maya.{stage}", fromlist=["_"])
        assert Path(module.__file__) == root / stage / "__init__.py"
    assert (SRC / "maya_trace_spec" / "__init__.py").is_file()


@pytest.mark.slow
def test_plain_checkout_imports_with_src_on_the_path(tmp_path):
    """`python -c "import maya.estimators"` from a checkout: nothing installed, only `src/` on the path."""
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); import maya.estimators, maya.simulator, maya.search, "
        "maya.emulator.launcher, maya.cli; print(maya.estimators.__file__)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(SRC)], capture_output=True, text=True, check=True, cwd=tmp_path
    )
    assert Path(out.stdout.strip()) == SRC / "maya" / "estimators" / "__init__.py"


@pytest.mark.slow
def test_spec_core_imports_only_pyarrow():
    code = (
        "import sys, maya_trace_spec, maya_trace_spec.interop.kineto, maya_trace_spec.vocabulary; "
        "heavy = sorted(m for m in ('duckdb', 'pandera', 'pandas', 'typer', 'rich', 'dagster', 'torch', 'maya') "
        "if m in sys.modules); print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.slow
def test_editable_install(tmp_path, checkout_build):
    """An editable install (PEP 660 wheel, as `pip install -e .` builds it) points at src/ in the source
    tree. Built and unpacked aside so the test environment is untouched."""
    build = "import sys; from setuptools.build_meta import build_editable; print(build_editable(sys.argv[1]))"
    with checkout_build():
        out = subprocess.run(
            [sys.executable, "-c", build, str(tmp_path)], cwd=REPO, capture_output=True, text=True, check=True
        )
    site = tmp_path / "site"
    with zipfile.ZipFile(tmp_path / out.stdout.strip().splitlines()[-1]) as whl:
        whl.extractall(site)
    # what the editable wheel adds (a path entry or a finder) goes first, ahead of the copy of maya
    # installed in the test environment
    code = (
        f"import site, sys; paths, finders = list(sys.path), list(sys.meta_path); site.addsitedir({str(site)!r}); "
        "sys.path[:0] = [p for p in sys.path if p not in paths]; "
        "sys.meta_path[:0] = [f for f in sys.meta_path if f not in finders]; "
        "import maya.emulator, maya_trace_spec; from maya.core.paths import data_dir; "
        "print(maya.emulator.__file__); print(maya_trace_spec.__file__); print(data_dir())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=tmp_path)
    emulator, spec, data = out.stdout.split()
    assert Path(emulator) == SRC / "maya" / "emulator" / "__init__.py"
    assert Path(spec) == SRC / "maya_trace_spec" / "__init__.py"
    assert Path(data) == SRC / "maya" / "data"


@pytest.mark.slow
def test_wheel_carries_every_package_and_the_shipped_data(tmp_path, checkout_build):
    """A non-editable install must not silently lack a package, the emulator's native sources or data."""
    build = "import sys; from setuptools.build_meta import build_wheel; print(build_wheel(sys.argv[1]))"
    with checkout_build():
        out = subprocess.run(
            [sys.executable, "-c", build, str(tmp_path)], cwd=REPO, capture_output=True, text=True, check=True
        )
    with zipfile.ZipFile(tmp_path / out.stdout.strip().splitlines()[-1]) as whl:
        names = set(whl.namelist())
    packages = {str(p.relative_to(SRC)) for p in SRC.rglob("__init__.py") if "data" not in p.parts}
    assert packages - names == set()
    shipped = {
        str(p.relative_to(SRC))
        for p in (SRC / "maya" / "data").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }
    assert shipped - names == set()
    native = {str(p.relative_to(SRC)) for p in (SRC / "maya" / "emulator" / "native").iterdir()}
    assert native - names == set()
