import fcntl
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

import pytest

from maya_trace_spec import synthetic

pytest_plugins = ["pytester"]

# OpenMP threads (XGBoost's, torch's) sleep while they wait rather than spin: on a loaded machine, or with
# pytest-xdist's workers sharing the cores, spinning burned most of the CPU that training an estimator took
# (test_held_out_bands.py: 28.5 -> 5.2 CPU-s). Read when libgomp loads, so set before anything imports it.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# pytest caches each test module it rewrites (tests/**/__pycache__/*-pytest-*.pyc, git-ignored) only where Python may
# write bytecode: under PYTHONDONTWRITEBYTECODE every run, and every pytest-xdist worker, rewrote all ~300 modules
# again (about half of collecting the suite). This process and its workers write them; processes the tests start
# keep the variable as set.
sys.dont_write_bytecode = False
if "PYTEST_XDIST_WORKER" in os.environ:
    # pytest-xdist's workers start with COLUMNS=80 and LINES=24: Rich's consoles, made at import, would keep that
    # width for good, where the CLI tests give each invocation its own COLUMNS.
    for name in ("COLUMNS", "LINES"):
        os.environ.pop(name, None)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """`e2e` implies `slow`: a script run end to end is never on the fast path (`-m "not slow"`)."""
    for item in items:
        if item.get_closest_marker("e2e") and not item.get_closest_marker("slow"):
            item.add_marker(pytest.mark.slow)


def shared_tmp(tmp_path_factory: pytest.TempPathFactory, name: str) -> Path:
    """A temporary folder of the whole session: under pytest-xdist the same for every worker (beside theirs)."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        return tmp_path_factory.mktemp(name)
    shared = tmp_path_factory.getbasetemp().parent / name
    shared.mkdir(exist_ok=True)
    return shared


@pytest.fixture(scope="session")
def emulator_cache(tmp_path_factory) -> Path:
    """One build of the emulator's stub libraries for the whole session, shared by pytest-xdist's workers (the
    build locks its key: the first worker builds, the others wait and reuse it)."""
    return shared_tmp(tmp_path_factory, "emulator")


@pytest.fixture(scope="session")
def checkout_build(tmp_path_factory) -> Callable[[], AbstractContextManager]:
    """A lock to hold while building Maya from this checkout (setuptools writes build/ and *.egg-info into it), so
    that pytest-xdist's workers never build in the same folders at once."""
    path = shared_tmp(tmp_path_factory, "locks") / "checkout-build.lock"

    @contextmanager
    def held() -> Iterator[None]:
        with open(path, "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield

    return held


@pytest.fixture(autouse=True)
def maya_home(tmp_path_factory, monkeypatch, emulator_cache):
    """Every test gets its own MAYA_HOME (warehouse, runs) so nothing touches the user's, and installs no Transformer
    Engine on first need (MAYA_TE_AUTO=off: CI has no cached wheel and must not spend a build's minutes on one)."""
    home = tmp_path_factory.mktemp("maya_home")
    monkeypatch.setenv("MAYA_HOME", str(home))
    monkeypatch.delenv("MAYA_WAREHOUSE", raising=False)
    monkeypatch.setenv("MAYA_EMULATOR_CACHE", str(emulator_cache))
    monkeypatch.setenv("MAYA_TE_AUTO", "off")
    return home


@pytest.fixture(autouse=True)
def hardware_files(monkeypatch):
    """Parts loaded from hardware files are registered for the process (`maya.core.hardware.load_file`):
    each test starts with none, as a new `maya` process would."""
    from maya.core import hardware

    monkeypatch.setattr(hardware, "_registered", {})


@pytest.fixture
def run_dir(tmp_path) -> Path:
    return synthetic.write_run(tmp_path / "run", world_size=2, calls_per_rank=500, ops_per_rank=50)
