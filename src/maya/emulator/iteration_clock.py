"""Training iterations of an emulated rank, and `maya emulate --iterations N`.

An iteration ends at an optimizer step (a global optimizer-step post-hook). A step only starts a new
iteration if the model computed something since the last one began (a module was called, autograd ran
a backward op, or a CUDA graph was launched): a script stepping several optimizers per iteration
(Muon and AdamW, say) counts one iteration, not one per optimizer, and the later optimizers' ops are
labelled with the iteration the first one ended (the pre-hook). GradScaler's skipped steps never reach
the hooks. Steps taken inside a backward (an optimizer per parameter, stepped by its gradient's hook:
torchtune's `optimizer_in_bwd`) end one iteration, when that backward ends, not one each; a backward run inside
another (a reentrant activation checkpoint's, in its block's backward) ends none: the outermost one does.

With a limit of N, the rank stops once N iterations are done, at the first sign of the next one:
the next call of a module (an evaluation pass after step N included), or a step that would end
iteration N + 1 (scripts whose model runs as a replayed CUDA graph call no module). It stops by
raising `StopScript` (a BaseException, which the script's `except Exception` lets through), so every
rank of an SPMD job stops at the same iteration and the trace holds iterations 0..N-1 whole.
"""

from __future__ import annotations

import ctypes
import sys
from collections.abc import Callable
from typing import Any

from maya.core import settings
from maya.core.script_runner import StopScript

ITERATIONS_ENV = settings.EMU_ITERATIONS.name
"""The limit (`maya emulate --iterations`), passed to the rank; unset or 0: run the script to its end."""


class IterationLimitReached(StopScript):
    """The rank did the training iterations it was asked for."""


class IterationClock:
    """Counts iterations; `set_iteration(n)` labels the ops entered from then on and `relabel_open(n)` the
    innermost op open (the observer)."""

    def __init__(
        self,
        set_iteration: Callable[[int], None],
        relabel_open: Callable[[int], None],
        backward_ops: Callable[[], int],
        graph_launches: Callable[[], int],
        in_backward: Callable[[], bool],
        at_backward_end: Callable[[Callable[[], None]], None],
        limit: int = 0,
    ):
        """`in_backward`: whether a backward runs on this thread; `at_backward_end`: runs a callable once when the
        outermost backward running ends (however often it is given it)."""
        self.set_iteration, self.limit, self.relabel_open = set_iteration, limit, relabel_open
        self.backward_ops, self.graph_launches = backward_ops, graph_launches
        self.in_backward, self.at_backward_end = in_backward, at_backward_end
        self.iteration = 0
        self.stepped = False
        self.module_calls = 0
        self.marks = self._marks()

    def _marks(self) -> tuple[int, int, int]:
        return self.module_calls, self.backward_ops(), self.graph_launches()

    def module_called(self) -> None:
        """A module's forward starts (the runner's global forward pre-hook)."""
        self.module_calls += 1
        if self.limit and self.iteration >= self.limit:
            self._stop()

    def optimizer_stepping(self, *_) -> None:
        """An optimizer step starts (the global optimizer-step pre-hook): with no model computation since the
        last step, it is another optimizer of the iteration that step ended, and its ops are labelled so. A step
        inside a backward belongs to that backward's iteration."""
        if not self.in_backward() and self.stepped and self._marks() == self.marks:
            self.set_iteration(self.iteration - 1)
            self.relabel_open(self.iteration - 1)  # the step's own range, entered before this hook

    def optimizer_stepped(self, *_) -> None:
        """An optimizer step ended (the global optimizer-step post-hook); one inside a backward ends the iteration
        when the outermost backward ends."""
        if self.in_backward():
            self.at_backward_end(self._ended)
        else:
            self._ended()

    def _ended(self) -> None:
        """An iteration's optimizer steps are done: a new iteration starts, unless the model computed nothing since
        the last one began (another optimizer of that iteration)."""
        marks = self._marks()
        if self.stepped and marks == self.marks:
            self.set_iteration(self.iteration)  # another optimizer of the iteration that just ended
            return
        self.stepped, self.marks = True, marks
        if self.limit and self.iteration >= self.limit:
            self._stop()
        self.iteration += 1
        self.set_iteration(self.iteration)

    def _stop(self) -> None:
        print(
            f"maya emulator: stopping the script after {self.iteration} training iterations "
            f"(--iterations {self.limit})",
            file=sys.stderr,
            flush=True,
        )
        raise IterationLimitReached(self.iteration)


class OutermostBackward:
    """Runs callables when the outermost of the backwards running ends: autograd's backwards started from Python
    (`backward()`, `torch.autograd.grad`: `torch.autograd._engine_run_backward`) are counted as they nest; one
    started otherwise (none is known) runs them when it ends itself (autograd's final callbacks)."""

    def __init__(self, autograd: Any, task: Callable[[], int], queue: Callable[[Callable[[], None]], None]):
        """`autograd`: the `torch.autograd` module; `task`: the backward running on this thread (autograd's graph
        task id; -1: none); `queue`: runs a callable when that backward ends."""
        self.task, self.queue = task, queue
        self.depth = 0
        self.pending: list[Callable[[], None]] = []
        self.queued_task = -1
        run = autograd._engine_run_backward

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.depth += 1
            try:
                result = run(*args, **kwargs)
            except BaseException:
                self.depth -= 1
                if not self.depth:
                    self.pending.clear()  # the backward failed: nothing ended
                raise
            self.depth -= 1
            if not self.depth:
                pending, self.pending = self.pending, []
                for end in pending:
                    end()
            return result

        autograd._engine_run_backward = counted

    def at_end(self, end: Callable[[], None]) -> None:
        """Runs `end` once when the outermost backward running ends."""
        if self.depth:
            if end not in self.pending:
                self.pending.append(end)
            return
        task = self.task()
        if task != self.queued_task:
            self.queued_task = task
            self.queue(end)


def native_clock(observer: ctypes.CDLL, emulator: ctypes.CDLL, limit: int) -> IterationClock:
    """The clock of a rank: labels go to the op observer (libmaya_ops), backward ops are counted there,
    CUDA graph launches by the stubs (libmaya_emu); autograd says whether a backward runs, and when the outermost
    ends."""
    import torch

    task = torch._C._current_graph_task_id
    outermost = OutermostBackward(torch.autograd, task, torch.autograd.Variable._execution_engine.queue_callback)
    observer.maya_ops_set_iteration.argtypes = [ctypes.c_int32]
    observer.maya_ops_relabel_open.argtypes = [ctypes.c_int32]
    observer.maya_ops_backward_ops.restype = ctypes.c_int64
    emulator.maya_emu_graph_launches.restype = ctypes.c_int64
    return IterationClock(
        observer.maya_ops_set_iteration,
        observer.maya_ops_relabel_open,
        observer.maya_ops_backward_ops,
        emulator.maya_emu_graph_launches,
        lambda: task() != -1,
        outermost.at_end,
        limit,
    )
