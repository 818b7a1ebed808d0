"""The iteration clock on torch's own autograd (CPU): optimizer steps inside a backward, nested backwards included."""

import pytest
import torch
import torch.utils.checkpoint as checkpoint

from maya.emulator.iteration_clock import IterationClock, OutermostBackward


def clock_on_autograd(monkeypatch) -> tuple[IterationClock, list[int]]:
    """A clock whose labels are recorded, on this process's autograd (its `_engine_run_backward` wrapped for the test
    only); the model's computation is counted by its module calls."""
    monkeypatch.setattr(torch.autograd, "_engine_run_backward", torch.autograd._engine_run_backward)
    task = torch._C._current_graph_task_id
    outermost = OutermostBackward(torch.autograd, task, torch.autograd.Variable._execution_engine.queue_callback)
    labels: list[int] = []
    clock = IterationClock(labels.append, lambda _: None, lambda: 0, lambda: 0, lambda: task() != -1, outermost.at_end)
    return clock, labels


@pytest.mark.slow
def test_steps_inside_nested_backwards_end_one_iteration_each_outermost_one(monkeypatch):
    """Reentrant checkpointing runs each block's backward inside the loss's; 8 steps inside 4 inner backwards end one
    iteration, when the loss's backward ends (they ended 4, one per inner backward)."""
    clock, labels = clock_on_autograd(monkeypatch)
    blocks = torch.nn.ModuleList(torch.nn.Linear(8, 8) for _ in range(4))
    hooks = [torch.nn.modules.module.register_module_forward_pre_hook(lambda *_: clock.module_called())]
    optimizers = {p: torch.optim.SGD([p], lr=0.1) for p in blocks.parameters()}
    ended_inside: list[int] = []

    def step(p: torch.Tensor) -> None:
        optimizers[p].step()
        clock.optimizer_stepped()
        ended_inside.append(clock.iteration)

    for p in blocks.parameters():
        p.register_post_accumulate_grad_hook(step)
    x = torch.randn(2, 8, requires_grad=True)
    try:
        for iteration in range(3):
            h = x
            for block in blocks:
                h = checkpoint.checkpoint(block, h, use_reentrant=True)
            h.sum().backward()
            assert clock.iteration == iteration + 1
    finally:
        for hook in hooks:
            hook.remove()
    assert ended_inside == [0] * 8 + [1] * 8 + [2] * 8
    assert labels == [1, 2, 3]


def test_a_failed_backward_ends_no_iteration(monkeypatch):
    """A step inside a backward that then fails: the iteration is not ended, and the next backward's steps end one."""
    clock, _ = clock_on_autograd(monkeypatch)
    w = torch.nn.Parameter(torch.ones(3))
    stepped = []

    def step(_: torch.Tensor) -> None:
        clock.optimizer_stepped()
        stepped.append(1)
        if len(stepped) == 1:
            raise RuntimeError("the first backward fails")

    w.register_post_accumulate_grad_hook(step)
    try:
        (w * 2).sum().backward()
    except RuntimeError:
        pass
    assert clock.iteration == 0
    (w * 2).sum().backward()
    assert clock.iteration == 1
