"""Where points are evaluated: this machine (one emulation at a time by default, since an emulation
already uses every core) or a Ray cluster. Both run `fn(task)` for a batch and yield results as they
complete."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Protocol, TypeVar

T = TypeVar("T")
R = TypeVar("R")


class Executor(Protocol):
    def map(self, fn: Callable[[T], R], items: Sequence[T]) -> Iterator[tuple[T, R]]: ...

    def close(self) -> None: ...


class LocalExecutor:
    """`parallel` worker processes (spawned, so `fn` must be importable); with 1, this process."""

    def __init__(self, parallel: int = 1):
        self.parallel = parallel
        self._pool = None

    def map(self, fn: Callable[[T], R], items: Sequence[T]) -> Iterator[tuple[T, R]]:
        if self.parallel <= 1:
            for item in items:
                yield item, fn(item)
            return
        if self._pool is None:
            import multiprocessing

            self._pool = ProcessPoolExecutor(self.parallel, mp_context=multiprocessing.get_context("spawn"))
        futures = {self._pool.submit(fn, item): item for item in items}
        for future in as_completed(futures):
            yield futures[future], future.result()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None


class RayExecutor:
    """One Ray task per item on the cluster at `address` (None: a local Ray instance, `init_args`
    passed to `ray.init`); each task reserves `task_cpus`."""

    def __init__(self, address: str | None = None, task_cpus: float = 1, **init_args):
        import ray

        self._owned = not ray.is_initialized()
        if self._owned:
            # workers import Maya as installed, not from a source tree in the working directory
            init_args.setdefault("runtime_env", {"env_vars": {"PYTHONSAFEPATH": "1"}})
            ray.init(address=address, **init_args)
        self._ray, self._task_cpus = ray, task_cpus

    def map(self, fn: Callable[[T], R], items: Sequence[T]) -> Iterator[tuple[T, R]]:
        remote = self._ray.remote(num_cpus=self._task_cpus)(fn)
        pending = {remote.remote(item): item for item in items}
        while pending:
            done, _ = self._ray.wait(list(pending), num_returns=1)
            for ref in done:
                yield pending.pop(ref), self._ray.get(ref)

    def close(self) -> None:
        if self._owned:
            self._ray.shutdown()
