"""Run the profiler from a plain source checkout, nothing installed (GPU hosts):

    python src/maya/profiler/run_on_device.py kernels --out DIR [--budget-min 8] ...
    python src/maya/profiler/run_on_device.py workload --out DIR -- python SCRIPT ARGS

The same as `PYTHONPATH=src python -m maya.profiler ...`. Needs only the standard library, torch,
numpy and pyarrow: the profiler imports nothing else of Maya's dependencies.
"""

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SRC = HERE.parents[1]


def register_source_packages() -> None:
    """Make the checkout's `maya` and `maya_trace_spec` importable: `src/` first on `sys.path`, and this
    script's own folder off it (its module names must not shadow others)."""
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]
    sys.path.insert(0, str(SRC))


if __name__ == "__main__":
    register_source_packages()
    from maya.profiler.commands import main

    raise SystemExit(main())
