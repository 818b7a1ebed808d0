from pathlib import Path

import pytest

from maya_trace_spec import synthetic

pytest_plugins = ["pytester"]


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """`e2e` implies `slow`: a script run end to end is never on the fast path (`-m "not slow"`)."""
    for item in items:
        if item.get_closest_marker("e2e") and not item.get_closest_marker("slow"):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def emulator_cache(tmp_path_factory):
    """One build of the emulator's stub libraries for the whole session."""
    return tmp_path_factory.mktemp("emulator")


@pytest.fixture(autouse=True)
def maya_home(tmp_path_factory, monkeypatch, emulator_cache):
    """Every test gets its own MAYA_HOME (warehouse, runs) so nothing touches the user's."""
    home = tmp_path_factory.mktemp("maya_home")
    monkeypatch.setenv("MAYA_HOME", str(home))
    monkeypatch.delenv("MAYA_WAREHOUSE", raising=False)
    monkeypatch.setenv("MAYA_EMULATOR_CACHE", str(emulator_cache))
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
