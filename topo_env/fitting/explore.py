"""Exploration traces for the fit: a team plays uniform random joint actions, recorded.

:func:`record_exploration` is how traces for :func:`topo_env.fitting.fit.fit_traces` are made, by the
sim-to-real route and by the fit's tests alike: ``episodes`` episodes of the env (any backend, the
simulated team or an LLM one), every agent an independent uniform choice among its valid actions
each round, on train-split tasks drawn from a pool of task indices, appended to a JSON-lines trace
file by ``env.record(path)`` (schema ``topomarl.trace/1``).

A pool smaller than the number of episodes makes tasks recur: the several episodes of one task
identify its hidden latent (the fit's ``task_spread``) apart from the agents' per-episode blind spots.
The default, one task per :data:`EPISODES_PER_TASK` episodes, is what the fit's tolerances were
measured with (``tests/test_fit.py``, ``tests/test_fit_recovery.py``).
"""
from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import numpy as np

from topo_env.references.baselines import env_decision_calls, episode_calls, step_calls
from topo_env.engine.config_checks import ConfigError

EPISODES_PER_TASK = 3


def default_pool(episodes: int) -> int:
    """The task pool :func:`record_exploration` uses when given none: one task per
    :data:`EPISODES_PER_TASK` episodes (at least one)."""
    return max(1, math.ceil(episodes / EPISODES_PER_TASK))


def _whole(value, name: str, low: int | None) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or (low is not None and value < low):
        need = "an integer" if low is None else f"an integer >= {low}"
        raise ConfigError(f"record_exploration: {name}={value!r}; give {need}")
    return int(value)


def record_exploration(env, path, episodes: int, seed: int, pool: int | None = None, rng_state: dict | None = None,
                       after_episode: Callable[[dict], None] | None = None, truth=None) -> dict:
    """Play ``episodes`` episodes of uniform random joint actions on ``env`` (a
    :class:`topo_env.frontends.parallel_env.TopologyParallelEnv`, any backend) and append their traces to ``path``.

    Randomness: one ``numpy.random.default_rng(seed)`` draws, per episode, the task (an index in
    ``range(pool)`` of the train split: ``reset(options={"task": index, "split": "train"})``), the
    episode's env seed, and each round every agent's action, uniform over the actions its
    ``action_mask`` allows. ``pool`` None: :func:`default_pool` (one task per three episodes). The
    env records to ``path`` while this runs (:meth:`record`, appending) and records nothing
    afterwards, also when an episode raises.

    Resuming: after each episode (its trace written) ``after_episode`` gets ``{"episodes": e,
    "calls": c, "tokens": t, "rng": state}``, the figures so far and the generator's state
    (``rng.bit_generator.state``, JSON-serialisable); a call given that ``rng_state``, the same
    ``seed`` and the same ``pool`` (given: its default depends on ``episodes``) plays the episodes
    that followed it exactly as the uninterrupted call did.

    Returns ``{"episodes": E, "calls": C, "tokens": T}``: C the LLM calls made (the agents' and the
    decision node's, :func:`topo_env.references.baselines.episode_calls`), T the team tokens of every episode.
    ``truth``: a file for the tasks' hidden truth, kept apart from the traces (``env.record``'s).
    A bad ``episodes``, ``seed`` or ``pool`` raises :class:`~topo_env.engine.config_checks.ConfigError` naming it."""
    episodes = _whole(episodes, "episodes", 1)
    seed = _whole(seed, "seed", None)
    pool = default_pool(episodes) if pool is None else _whole(pool, "pool", 1)
    rng = np.random.default_rng(seed)
    if rng_state is not None:
        rng.bit_generator.state = rng_state
    calls = tokens = 0
    env.record(str(Path(path)), truth)
    try:
        for played in range(1, episodes + 1):
            task = int(rng.integers(pool))
            observations, _ = env.reset(seed=int(rng.integers(2**31 - 1)), options={"task": task, "split": "train"})
            agent_calls, infos = 0, {}
            while env.agents:
                actions = {a: int(rng.choice(np.flatnonzero(np.asarray(observations[a]["action_mask"]))))
                           for a in env.agents}
                observations, _, _, _, infos = env.step(actions)
                agent_calls += step_calls(infos)
            calls += episode_calls(agent_calls, env_decision_calls(env))
            tokens += int(infos[env.possible_agents[0]]["team_tokens"])
            if after_episode is not None:
                after_episode({"episodes": played, "calls": calls, "tokens": tokens, "rng": rng.bit_generator.state})
    finally:
        env.record(None)
    return {"episodes": episodes, "calls": calls, "tokens": tokens}
