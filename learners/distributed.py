"""Rollouts past one machine: W rollout workers as Ray actors feeding one learner (``runtime.ray``).

Each :class:`RolloutWorker` is a Ray actor with its own env (and so its own backend client, e.g.
one connection pool to the team's LLM server), its own copy of the agent network, and K =
``runtime.episodes_in_flight`` episodes in flight (:class:`topo_env.frontends.inflight.EpisodesInFlight`).
:class:`RayRollouts` is the driver's side, in the role :class:`~topo_env.frontends.inflight.EpisodesInFlight`
has for a single process: it hands finished episodes back **in episode-index order**, so the
training loop of :func:`learners.training.train` commits, updates and checkpoints exactly as it does on one
machine.

* Episodes are dealt in batches of K consecutive indices; batch b goes to worker ``b % W`` and is
  launched once batch ``b - W`` has been handed back and the consumer has returned to the loop
  (so at most W x K episodes are in flight, and worker ``b % W`` is then free).
* Episode j's task, noise and exploration are functions of j alone (:mod:`topo_env.engine.seeding`, the
  same arguments as :class:`learners.training_run.EpisodeSource`'s ``_launch``): a Ray run plays the single-process run's
  episodes.
* The weights: every ``runtime.sync_every`` committed episodes the driver snapshots the learner's
  agent network once (``ray.put``); a batch is played with the latest snapshot at its launch, and
  each stored episode records that snapshot's version (the committed episodes it had seen). The
  version of episode j is thus a function of j, K, W and ``sync_every``: a Ray run is
  deterministic whatever the workers' timing.
* Faults: workers are restarted by Ray (``max_restarts``); a batch whose worker died is
  re-submitted (with the same weights) and re-run by the restarted worker. The driver stores
  each index exactly once: a batch's results are handed back once, when its turn comes.

``ray`` is an optional dependency (``pip install 'topomarl[distributed]'``): it is imported only
when a :class:`RayRollouts` is made, so importing this module (and the default training path)
loads no Ray.
"""
from __future__ import annotations

import dataclasses
import logging
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch

from learners.agent_network import build_agent_network
from learners.config import ExperimentConfig
from topo_env.frontends.inflight import EpisodesInFlight, sibling_envs
from learners.runner import EpisodeRunner, space_dims
from learners.schedules import epsilon_at
from topo_env.frontends.comm_actions import N_ACTIONS
from topo_env.engine.cli import RunError
from topo_env.engine.config_checks import ConfigError
from topo_env.frontends.parallel_env import TopologyParallelEnv
from topo_env.engine.seeding import EXPLORATION_STREAM, episode_rng, training_env_seed

MAX_RESTARTS = 5
"""Restarts Ray makes of one worker (and re-runs the driver makes of one batch) before the run stops."""
REVIVE_S = 120.0
"""How long the driver waits for a dead worker to be back before the run stops."""


def require_ray(cfg: ExperimentConfig) -> None:
    """A one-line ConfigError, before anything runs, if ``runtime.ray`` is set and Ray is not installed."""
    import importlib.util
    if cfg.runtime.ray is not None and importlib.util.find_spec("ray") is None:
        raise ConfigError("runtime.ray is set but Ray is not installed: pip install 'topomarl[distributed]' "
                          "(or set runtime.ray=null)")


class RolloutWorker:
    """One rollout worker (a Ray actor; a plain object too): plays batches of training episodes
    with K episodes in flight on its own env and agent network (CPU)."""

    def __init__(self, cfg: ExperimentConfig):
        torch.set_num_threads(cfg.runtime.torch_threads)
        self.cfg = cfg
        env = TopologyParallelEnv(dataclasses.replace(cfg.env, split="train"))
        envs = sibling_envs(env, cfg.runtime.episodes_in_flight)
        agent = build_agent_network(space_dims(env)[0], N_ACTIONS, cfg.qmix)
        self.runners = [EpisodeRunner(e, agent, torch.device("cpu")) for e in envs]  # one network: its weights
        self.rollouts = EpisodesInFlight(envs)  # change only between batches, and episodes are played on a snapshot
        self.version: int | None = None

    def pid(self) -> int:
        """The worker's process id."""
        return os.getpid()

    def play(self, indices: list[int], version: int, weights: list) -> list[tuple[int, Any, Any]]:
        """Training episodes ``indices`` played with the weights of ``version`` (``weights``: a
        one-element list holding them or their Ray object reference, so that they are fetched only
        when the version changes): ``[(j, record, stats), ...]`` in index order."""
        if version != self.version:
            state = weights[0]
            if not isinstance(state, dict):  # an ObjectRef
                import ray
                state = ray.get(state)
            self.runners[0].agent.load_state_dict(state)
            self.version = version
        cfg, seed = self.cfg, self.cfg.train.seed

        def launch(env: TopologyParallelEnv, slot: int, j: int):  # as EpisodeSource._launch
            return self.runners[slot].arun(
                epsilon_at(j, cfg), episode_rng(seed, EXPLORATION_STREAM, j), seed=training_env_seed(seed, j),
                team_explore=cfg.exploration.team_explore, deviation_explore=cfg.exploration.deviation_explore,
                deviation_rank_decay=cfg.exploration.deviation_rank_decay, policy_version=version,
                topology_explore=cfg.exploration.topology_explore)

        return [(j, record, stats) for j, (record, stats) in self.rollouts.play(indices, launch)]


class RayRollouts:
    """Training episodes from ``cfg.runtime.ray.workers`` Ray rollout workers, handed back in index
    order (:meth:`play`); ``weights()`` returns the learner's agent network's state now (called
    once per sync, every ``cfg.runtime.sync_every`` committed episodes).

    Connects to (``address: auto``) or starts (``local``) a Ray cluster unless Ray is already
    initialized in this process, and shuts down only what it started."""

    def __init__(self, cfg: ExperimentConfig, weights: Callable[[], dict]):
        require_ray(cfg)
        import ray
        self.ray, self.cfg, self._weights = ray, cfg, weights
        self.k, self.w = cfg.runtime.episodes_in_flight, cfg.runtime.ray.workers
        self._started = False
        if not ray.is_initialized():
            ray.init(address=cfg.runtime.ray.address, include_dashboard=False, logging_level=logging.WARNING,
                     configure_logging=True)
            self._started = True
        # max_concurrency 2: a worker answers pid() while it plays (it is only ever sent one batch at a time)
        self._actor = ray.remote(max_restarts=MAX_RESTARTS, max_task_retries=0, max_concurrency=2)(RolloutWorker)
        self.workers = [self._actor.remote(cfg) for _ in range(self.w)]
        try:
            self.worker_pids()  # every worker built its env and network
        except ray.exceptions.RayError as err:
            self.close()
            cause = [line for line in str(err).splitlines() if line.strip()][-1].strip()
            raise RunError(f"a Ray rollout worker could not start: {cause}") from None
        self._pending: dict[int, dict] = {}  # batch number -> {"indices", "version", "weights", "ref", "tries"}
        self._ready: list = []  # the episodes of the batch being handed back, not yet handed back
        self._launching = True
        self._snapshot: tuple[int, list] | None = None  # (version, [ObjectRef]) of the latest sync
        self.reruns: list[tuple[int, list[int]]] = []  # (worker, indices) of each batch re-run after a worker died

    def worker_pids(self) -> list[int]:
        """The process ids of the workers now (a restarted worker has a new one)."""
        return self.ray.get([w.pid.remote() for w in self.workers])

    @property
    def in_flight(self) -> int:
        """Episodes launched and not yet handed back."""
        return sum(len(batch["indices"]) for batch in self._pending.values()) + len(self._ready)

    def stop_launching(self) -> None:
        """Launch no further episode; those in flight still finish and are handed back."""
        self._launching = False

    def play(self, indices: Iterable[int], start_version: int = 0) -> Iterator[tuple[int, Any]]:
        """``(j, (record, stats))`` for each training episode index j of ``indices`` (consecutive),
        in that order; ``start_version``: the committed episodes before the first (a resumed run's
        checkpoint). Leaving the iteration early (or finishing it) ends the workers."""
        indices = list(indices)
        batches = [indices[i:i + self.k] for i in range(0, len(indices), self.k)]
        committed, sync_every = start_version, self.cfg.runtime.sync_every
        self._launching, launched = True, 0
        try:
            self._sync(committed)
            while True:
                while self._launching and launched < len(batches) and len(self._pending) < self.w:
                    self._launch(launched, batches[launched])
                    launched += 1
                if not self._pending:
                    return
                b = min(self._pending)
                self._ready = self._result(b)
                del self._pending[b]
                while self._ready:
                    j, record, stats = self._ready.pop(0)
                    yield j, (record, stats)
                    committed += 1  # the consumer committed episode j and came back for the next
                    if committed % sync_every == 0:
                        self._sync(committed)
        finally:
            self._pending.clear()
            self._ready = []
            self.close()

    def _sync(self, version: int) -> None:
        """Ship the learner's weights of now as ``version`` (one ``ray.put``)."""
        state = {name: tensor.detach().cpu() for name, tensor in self._weights().items()}
        self._snapshot = (version, [self.ray.put(state)])

    def _launch(self, b: int, indices: list[int]) -> None:
        version, weights = self._snapshot
        ref = self.workers[b % self.w].play.remote(indices, version, weights)
        self._pending[b] = {"indices": indices, "version": version, "weights": weights, "ref": ref, "tries": 0}

    def _result(self, b: int) -> list:
        """Batch b's episodes; a batch whose worker died is re-run (by the restarted worker)."""
        batch = self._pending[b]
        while True:
            try:
                return self.ray.get(batch["ref"])
            except self.ray.exceptions.RayActorError as err:
                batch["tries"] += 1
                w, span = b % self.w, f"{batch['indices'][0]}-{batch['indices'][-1]}"
                if batch["tries"] > MAX_RESTARTS:
                    raise RunError(f"rollout worker {w} died {batch['tries']} times playing training episodes {span} "
                                   f"({type(err).__name__}); the last checkpoint stands") from None
                print(f"\nrollout worker {w} died ({type(err).__name__}); re-running training episodes {span}",
                      file=sys.stderr)
                self.reruns.append((w, list(batch["indices"])))
                self._revive(w)
                batch["ref"] = self.workers[w].play.remote(batch["indices"], batch["version"], batch["weights"])

    def _revive(self, w: int) -> None:
        """Wait until worker w answers again (Ray restarts it); one that Ray gave up on is replaced."""
        errors = self.ray.exceptions
        deadline = time.monotonic() + REVIVE_S
        while True:
            try:
                self.ray.get(self.workers[w].pid.remote(), timeout=REVIVE_S)
                return
            except errors.ActorDiedError:  # restarts used up (or never started): a fresh worker
                self.workers[w] = self._actor.remote(self.cfg)
            except (errors.ActorUnavailableError, errors.GetTimeoutError):  # restarting
                pass
            if time.monotonic() > deadline:
                raise RunError(f"rollout worker {w} died and did not come back within {REVIVE_S:.0f} s; "
                               "the last checkpoint stands")
            time.sleep(0.2)

    def close(self) -> None:
        """End the workers (and the Ray cluster this object started)."""
        for worker in getattr(self, "workers", []):
            self.ray.kill(worker)
        self.workers = []
        if self._started:
            self.ray.shutdown()
            self._started = False
