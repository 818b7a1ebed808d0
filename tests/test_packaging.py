"""Packaging: the layout maps as DESIGN.md says, the spec core stays dependency-light, editable installs work."""
import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_subpackages_import_under_maya():
    import maya.collectors
    import maya.estimators
    import maya.pipelines
    import maya.simulator
    import maya_trace_spec

    for mod in (maya.collectors, maya.estimators, maya.simulator, maya.pipelines):
        assert mod.__name__.startswith("maya.")
    assert maya_trace_spec.SPEC_VERSION


def test_spec_core_imports_only_pyarrow():
    code = ("import sys, maya_trace_spec, maya_trace_spec.interop.kineto; "
            "heavy = sorted(m for m in ('duckdb', 'pandera', 'pandas', 'typer', 'rich', 'dagster', 'torch', 'maya') "
            "if m in sys.modules); print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_editable_install(tmp_path):
    """An editable install (PEP 660 wheel, as `pip install -e .` builds it) maps collectors/ etc. to
    maya.collectors in the source tree. Built and unpacked aside so the test environment is untouched."""
    build = ("import sys; from setuptools.build_meta import build_editable; "
             "print(build_editable(sys.argv[1]))")
    out = subprocess.run([sys.executable, "-c", build, str(tmp_path)], cwd=REPO, capture_output=True,
                         text=True, check=True)
    site = tmp_path / "site"
    with zipfile.ZipFile(tmp_path / out.stdout.strip().splitlines()[-1]) as whl:
        whl.extractall(site)
    # the editable finder goes first, ahead of the copy of maya installed in the test environment
    code = (f"import site, sys; site.addsitedir({str(site)!r}); sys.meta_path.insert(0, sys.meta_path.pop()); "
            "import maya.collectors, maya_trace_spec; print(maya.collectors.__file__); print(maya_trace_spec.__file__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=tmp_path)
    collectors, spec = out.stdout.split()
    assert Path(collectors) == REPO / "collectors" / "__init__.py"
    assert Path(spec) == REPO / "maya_trace_spec" / "__init__.py"


def test_every_source_package_is_listed_for_the_wheel():
    """A folder with an __init__.py under a mapped directory must be in [tool.setuptools] packages,
    or a non-editable install silently lacks it."""
    import tomllib

    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    missing = []
    for package, folder in config["package-dir"].items():
        for init in (REPO / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(REPO / folder)
            name = ".".join([package, *rel.parts]) if rel.parts else package
            if name not in listed:
                missing.append(name)
    assert missing == []
