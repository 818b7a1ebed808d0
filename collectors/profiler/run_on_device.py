"""Run the profiler from a plain source checkout, nothing installed (GPU hosts):

    python collectors/profiler/run_on_device.py kernels --out DIR [--budget-min 8] ...
    python collectors/profiler/run_on_device.py workload --out DIR -- python SCRIPT ARGS

An installed Maya maps the folder `collectors/` to the package `maya.collectors`; a source checkout
has no such mapping, so this script registers it (and puts the checkout first on `sys.path` for
`maya_trace_spec`) before handing over to the profiler's commands. Needs only the standard library,
torch, numpy and pyarrow.
"""
import importlib.util
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]


def register_source_packages() -> None:
    """Make `maya`, `maya.collectors` and `maya_trace_spec` importable from this checkout."""
    # The script's own folder is first on sys.path; its module names must not shadow others.
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]
    sys.path.insert(0, str(REPO / "src"))  # the maya core
    sys.path.insert(0, str(REPO))  # maya_trace_spec
    import maya

    if "maya.collectors" in sys.modules or importlib.util.find_spec("maya.collectors") is not None:
        return
    spec = importlib.util.spec_from_file_location("maya.collectors", REPO / "collectors" / "__init__.py",
                                                  submodule_search_locations=[str(REPO / "collectors")])
    module = importlib.util.module_from_spec(spec)
    sys.modules["maya.collectors"] = module
    spec.loader.exec_module(module)
    maya.collectors = module


if __name__ == "__main__":
    register_source_packages()
    from maya.collectors.profiler.commands import main

    raise SystemExit(main())
