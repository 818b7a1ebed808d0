"""Running an unmodified training script in this process, and marking the end of its iterations.

An iteration ends at each optimizer step (a global optimizer-step post-hook: scripts with one optimizer
step per iteration need nothing else). For scripts without an optimizer, `iterations_by` names a
function, by its dotted path, whose every call ends an iteration (e.g. `torch.Tensor.backward` or
`torch.autograd.backward`); it is wrapped for the duration of the run. A hook may end the script
early by raising `StopScript`.
"""

from __future__ import annotations

import functools
import importlib
import runpy
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from torch.optim.optimizer import register_optimizer_step_post_hook

OPTIMIZER_STEP = "optimizer"
"""What marks iterations when no `iterations_by` is given (as recorded in results)."""


class StopScript(BaseException):
    """Raised from an iteration hook to end the script once the runner has what it needs. A
    BaseException, so that the script's own `except Exception` handlers let it through."""


def run_script(argv: Sequence[str]) -> None:
    """Run `argv` (`script.py args` or `-m module args`) as `__main__` in this process."""
    saved = sys.argv[:]
    try:
        if argv[0] == "-m":
            sys.argv = [argv[1], *argv[2:]]
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        else:
            sys.argv = list(argv)
            sys.path.insert(0, str(Path(argv[0]).resolve().parent))
            runpy.run_path(argv[0], run_name="__main__")
    except SystemExit as e:
        if e.code not in (None, 0):
            raise
    finally:
        sys.argv = saved


def resolve_function(path: str) -> tuple[Any, str]:
    """The object holding the function at dotted `path` (a module or a class) and its attribute name."""
    parts = path.split(".")
    for split in range(len(parts) - 1, 0, -1):
        try:
            owner = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        try:
            for name in parts[split:-1]:
                owner = getattr(owner, name)
            if callable(getattr(owner, parts[-1])):
                return owner, parts[-1]
        except AttributeError:
            pass
        break
    raise ValueError(f"iterations by {path!r}: not a function given by its dotted path, e.g. torch.Tensor.backward")


@contextmanager
def iteration_hook(on_iteration: Callable[[], None], iterations_by: str | None = None) -> Iterator[None]:
    """Call `on_iteration()` at the end of each iteration of what runs inside the block: after each
    optimizer step, or after each call of the function at dotted path `iterations_by`."""
    if iterations_by is None:
        handle = register_optimizer_step_post_hook(lambda *_: on_iteration())
        try:
            yield
        finally:
            handle.remove()
        return
    owner, name = resolve_function(iterations_by)
    original = getattr(owner, name)

    @functools.wraps(original)
    def marked(*args, **kwargs):
        result = original(*args, **kwargs)
        on_iteration()
        return result

    setattr(owner, name, marked)
    try:
        yield
    finally:
        setattr(owner, name, original)
