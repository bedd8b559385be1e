"""K episodes in flight on one event loop, handed back in episode-index order.

With an LLM team the server is the bottleneck: one episode keeps at most one layer's calls
(about 3) in flight. :class:`EpisodesInFlight` plays up to K episodes at once on K sibling envs
(:meth:`topo_env.frontends.parallel_env.TopologyParallelEnv.sibling`: one backend each, one shared LLM client and
``max_concurrency``), as ``asyncio`` tasks on one event loop, and hands finished episodes back
**in index order** whatever order they complete in:

* episode j is launched (its coroutine built by ``launch(env, slot, j)``, synchronously, so that
  whatever it captures, such as a snapshot of the policy weights, is taken then) only once
  episode j - K has been handed back and the consumer has returned to the loop;
* so a training loop that commits and updates after each handed-back episode plays episode j
  with the weights of its first ``max(0, j - K + 1)`` committed episodes: a function of j and K
  only, and the run is deterministic for any completion order; K = 1 is the sequential loop;
* :meth:`stop_launching` (a budget reached, a Ctrl-C) lets the episodes already launched finish
  and be handed back, and launches nothing more.

The loop runs only while the consumer waits for the next episode (``run_until_complete``), so
the consumer's own work (updates, validation, checkpoints, even another pool's episodes on
another loop) runs between hand-backs with the in-flight episodes paused. A CPU backend
(``concurrent=False``, the simulated team) awaits nothing: its episodes are played to the end at
their launch, without an event loop (so it also runs where a loop is running, in a notebook),
with the same launch rule and so the same results.
"""
from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Iterable, Iterator, Sequence
from typing import Any

from topo_env.engine.episode import run_to_end
from topo_env.frontends.parallel_env import TopologyParallelEnv


def sibling_envs(env: TopologyParallelEnv, k: int) -> list[TopologyParallelEnv]:
    """``env`` and ``k - 1`` siblings of it (their own backends, its shared connections)."""
    return [env] + [env.sibling() for _ in range(k - 1)]


class EpisodesInFlight:
    """Plays episodes on ``envs`` (one episode in flight per env; K = ``len(envs)``) on the event
    loop of ``envs[0]``'s engine (where an LLM client keeps its connections)."""

    def __init__(self, envs: Sequence[TopologyParallelEnv]):
        if not envs:
            raise ValueError("EpisodesInFlight needs at least one env")
        self.envs = list(envs)
        self.concurrent = bool(self.envs[0].backend.concurrent)
        self.loop = self.envs[0].episode.event_loop() if self.concurrent else None
        self._pending: dict[int, tuple[asyncio.Task | _Played, int]] = {}
        self._launching = True

    @property
    def in_flight(self) -> int:
        """Episodes launched and not yet handed back."""
        return len(self._pending)

    def stop_launching(self) -> None:
        """Launch no further episode; those in flight still finish and are handed back."""
        self._launching = False

    def play(self, indices: Iterable[int],
             launch: Callable[[TopologyParallelEnv, int, int], Coroutine[Any, Any, Any]]) -> Iterator[tuple[int, Any]]:
        """``(j, result)`` for each episode index j of ``indices``, in that order; ``launch(env,
        slot, j)`` returns the coroutine that plays episode j on ``env`` (``envs[slot]``). An
        episode that raises raises here, when its turn comes; leaving the iteration early
        cancels the episodes in flight."""
        order = iter(indices)
        free = list(range(len(self.envs)))[::-1]
        self._launching = True
        try:
            while True:
                while self._launching and free:
                    j = next(order, None)
                    if j is None:
                        self._launching = False
                        break
                    slot = free.pop()
                    coro = launch(self.envs[slot], slot, j)
                    self._pending[j] = (self.loop.create_task(coro) if self.concurrent else _Played(coro), slot)
                if not self._pending:
                    return
                j = min(self._pending)
                task, slot = self._pending[j]
                result = self.loop.run_until_complete(task) if self.concurrent else task.result()
                del self._pending[j]
                free.append(slot)
                yield j, result
        finally:
            self._cancel()

    def _cancel(self) -> None:
        tasks = [task for task, _ in self._pending.values() if isinstance(task, asyncio.Task)]
        self._pending.clear()
        if not tasks or self.loop.is_closed():
            return
        for task in tasks:
            task.cancel()
        self.loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))


class _Played:
    """An episode of a CPU backend, played to the end at its launch: its value, or its error
    (raised when its turn comes, as a task's would be)."""

    def __init__(self, coro: Coroutine[Any, Any, Any]):
        self._value, self._error = None, None
        try:
            self._value = run_to_end(coro)
        except Exception as err:  # noqa: BLE001 - re-raised by result()
            self._error = err

    def result(self) -> Any:
        if self._error is not None:
            raise self._error
        return self._value
