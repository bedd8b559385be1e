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

from topo_env.engine.traces import append_trace, episode_record, truth_record
from topo_env.frontends.inflight import EpisodesInFlight, sibling_envs
from topo_env.references.baselines import (FIXED_BASELINES, env_decision_calls, episode_calls, fixed_joint_action,
                                           step_calls)
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
                       after_episode: Callable[[dict], None] | None = None, truth=None, in_flight: int = 1,
                       fixed_share: float = 0.0) -> dict:
    """Play ``episodes`` episodes of uniform random joint actions on ``env`` (a
    :class:`topo_env.frontends.parallel_env.TopologyParallelEnv`, any backend) and append their traces to ``path``.

    ``fixed_share`` p: each episode is, with probability p, one fixed topology played every round
    (:data:`~topo_env.references.baselines.FIXED_BASELINES` whose actions the mask allows, drawn
    uniformly) instead of random actions. Random joint actions almost never play a round without
    messages (3 of 764 rounds in the SmolLM2 team's 382 recorded episodes), so without such episodes
    the fit never sees solo, the topology it then mispredicts most (docs/results.md). p = 0 draws
    exactly what it drew before the option existed.

    Randomness: one ``numpy.random.default_rng(seed)`` draws, per episode, the task (an index in
    ``range(pool)`` of the train split: ``reset(options={"task": index, "split": "train"})``), the
    episode's env seed, and each round every agent's action, uniform over the actions its
    ``action_mask`` allows (the env's mask is the same every round, so an episode's draws are made
    at its start). ``pool`` None: :func:`default_pool` (one task per three episodes).

    ``in_flight`` K: episodes played at once on ``env`` and K - 1 siblings of it
    (:class:`~topo_env.frontends.inflight.EpisodesInFlight`: one LLM server is kept busy by several
    episodes, where one episode keeps at most a layer's calls in flight). The episodes, their traces
    (written in episode order, each once it is handed back) and the figures are the same for every K.

    Resuming: after each episode (its trace written) ``after_episode`` gets ``{"episodes": e,
    "calls": c, "tokens": t, "rng": state}``, the figures so far and the generator's state after
    that episode's draws (``rng.bit_generator.state``, JSON-serialisable); a call given that
    ``rng_state``, the same ``seed`` and the same ``pool`` (given: its default depends on
    ``episodes``) plays the episodes that followed it exactly as the uninterrupted call did.

    Returns ``{"episodes": E, "calls": C, "tokens": T}``: C the LLM calls made (the agents' and the
    decision node's, :func:`topo_env.references.baselines.episode_calls`), T the team tokens of every episode.
    ``truth``: a file for the tasks' hidden truth, kept apart from the traces (``env.record``'s).
    A bad ``episodes``, ``seed``, ``pool`` or ``in_flight`` raises
    :class:`~topo_env.engine.config_checks.ConfigError` naming it."""
    episodes = _whole(episodes, "episodes", 1)
    seed = _whole(seed, "seed", None)
    pool = default_pool(episodes) if pool is None else _whole(pool, "pool", 1)
    in_flight = _whole(in_flight, "in_flight", 1)
    if isinstance(fixed_share, bool) or not isinstance(fixed_share, (int, float)) or not 0.0 <= fixed_share <= 1.0:
        raise ConfigError(f"record_exploration: fixed_share={fixed_share!r}; give a share between 0 and 1")
    rng = np.random.default_rng(seed)
    if rng_state is not None:
        rng.bit_generator.state = rng_state
    path, truth = Path(path), None if truth is None else Path(truth)
    state_after: dict[int, dict] = {}  # episode index -> the generator's state after its draws
    decision_calls = env_decision_calls(env)

    def launch(slot_env, slot: int, j: int):
        task = int(rng.integers(pool))
        observations, _ = slot_env.reset(seed=int(rng.integers(2**31 - 1)), options={"task": task, "split": "train"})
        valid = {a: np.flatnonzero(np.asarray(observations[a]["action_mask"])) for a in slot_env.agents}
        fixed = fixed_topologies(slot_env, valid) if fixed_share > 0 and rng.random() < fixed_share else None
        if fixed:
            actions = fixed[int(rng.integers(len(fixed)))]
            joint = [dict(zip(slot_env.agents, map(int, actions))) for _ in range(slot_env.rounds)]
        else:
            joint = [{a: int(rng.choice(valid[a])) for a in slot_env.agents} for _ in range(slot_env.rounds)]
        state_after[j] = rng.bit_generator.state
        return _random_episode(slot_env, joint, truth is not None)

    envs = sibling_envs(env, in_flight)
    calls = tokens = 0
    try:
        for j, (record, truth_line, agent_calls, team_tokens) in EpisodesInFlight(envs).play(range(episodes), launch):
            append_trace(path, record)
            if truth is not None:
                append_trace(truth, truth_line)
            calls += episode_calls(agent_calls, decision_calls)
            tokens += team_tokens
            if after_episode is not None:
                after_episode({"episodes": j + 1, "calls": calls, "tokens": tokens, "rng": state_after.pop(j)})
    finally:
        for sibling in envs[1:]:
            sibling.close()
    return {"episodes": episodes, "calls": calls, "tokens": tokens}


def fixed_topologies(env, valid: dict[str, np.ndarray]) -> list[np.ndarray]:
    """The (N,) joint actions of the fixed topologies (:data:`FIXED_BASELINES`, the team's roles) whose
    every action is in ``valid`` (agent -> its allowed actions)."""
    roles = env.unwrapped.config.roles
    joints = [fixed_joint_action(name, len(env.agents), roles) for name in FIXED_BASELINES]
    return [j for j in joints if all(int(a) in valid[agent] for agent, a in zip(env.agents, j))]


async def _random_episode(env, joint: list[dict], with_truth: bool) -> tuple[dict, dict | None, int, int]:
    """Play the started episode of ``env`` with the joint actions ``joint`` (one per round): its trace
    record, its task's truth record (where asked), its agents' calls and its team tokens."""
    agent_calls, infos = 0, {}
    for actions in joint:
        _, _, _, _, infos = await env.astep(actions)
        agent_calls += step_calls(infos)
    if env.agents:
        raise RuntimeError(f"the episode did not end after its {len(joint)} rounds")
    episode = env.unwrapped.episode
    return (episode_record(episode), truth_record(episode.task) if with_truth else None, agent_calls,
            int(infos[env.possible_agents[0]]["team_tokens"]))
