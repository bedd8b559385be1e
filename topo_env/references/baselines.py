"""Fixed-topology baseline policies and the episode loop that scores a policy on the env.

Every baseline works with any env instance (any N, any number of rounds). The fixed ones
play the same joint action every round:

* ``solo``: every agent ``solo_process`` (no edges).
* ``full``: every agent ``broadcast_all`` (fully connected).
* ``chain``: agents 0..N-2 ``execute_verify`` (edge i -> i+1), agent N-1 ``solo_process``:
  the chain 0 -> 1 -> ... -> N-1.
* ``star``: the analyzer (the last agent whose role is ``analyzer``; agent N-1 if none)
  ``aggregate_refine`` (every other agent -> analyzer), the others ``solo_process``.
* ``debate``: every agent ``debate_check`` (i <-> its target).

``random`` picks uniformly among each agent's valid actions (its ``action_mask``).
"""
from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any, NamedTuple, Protocol

import numpy as np
from tqdm import tqdm

from topo_env.frontends.comm_actions import ACTION_NAMES, CommAction
from topo_env.engine.decision import settings_decision
from topo_env.engine.episode import run_to_end
from topo_env.engine.seeding import policy_rng
from topo_env.sim.profiles import get_profile
from topo_env.sim.tasks import SPLITS
from topo_env.engine.tasks import DEFAULT_ROUNDS, task_bucket  # rounds per domain (paper); used when a CLI gets no --rounds

BASELINES: tuple[str, ...] = ("solo", "full", "chain", "star", "debate", "random")
FIXED_BASELINES: tuple[str, ...] = tuple(b for b in BASELINES if b != "random")



def default_rounds(profile: str) -> int:
    """The paper's number of rounds for the domain of ``profile``."""
    return DEFAULT_ROUNDS[get_profile(profile).domain]


class CommPolicy(Protocol):
    """A policy of the PettingZoo env's vocabulary, what :func:`evaluate_policy` drives: one joint
    CommAction per env step, from what the agents observe. A policy sees the observations and the
    infos of the last step (or of the reset), never the env itself. The one interface every
    controller shares is :class:`controllers.base.Controller` (the orchestrator env); any CommPolicy
    plays there through :class:`controllers.per_agent.CommActionController`, which is how the
    leaderboard compares the fixed baselines and QMIX with the other systems."""

    name: str
    privileged: bool  # True only for oracles that are told the task (SequencePolicy by bucket)

    def reset(self, seed: int | None) -> None:
        """Start an episode; ``seed`` fixes any randomness of the policy (None: fresh entropy)."""
        ...

    def act(self, observations: dict, infos: dict) -> dict[str, int]:
        """Actions (ints 0..5) for every agent in ``observations`` (the env's live agents)."""
        ...


def agent_index(name: str) -> int:
    """The index i of the PettingZoo agent name ``agent_i``."""
    prefix, _, index = name.rpartition("_")
    if prefix != "agent" or not index.isdigit():
        raise ValueError(f"agent name {name!r}: expected 'agent_<index>'")
    return int(index)


def _check_name(name: str) -> None:
    if name not in BASELINES:
        raise ValueError(f"unknown baseline {name!r}; known baselines: {list(BASELINES)}")


def analyzer_index(n_agents: int, roles: Sequence[str] | None) -> int:
    """The last agent whose role is ``analyzer``; N-1 if there is none (or roles is None)."""
    if roles is None:
        return n_agents - 1
    found = [i for i, r in enumerate(roles) if r == "analyzer"]
    return found[-1] if found else n_agents - 1


def fixed_joint_action(name: str, n_agents: int, roles: Sequence[str] | None = None) -> np.ndarray:
    """The (N,) joint action a fixed baseline plays every round.

    Raises ValueError for an unknown name, for ``random`` (not fixed), for N < 2 or for
    roles of the wrong length.
    """
    _check_name(name)
    if name == "random":
        raise ValueError("baseline 'random' has no fixed joint action; use make_baseline('random', seed)")
    if isinstance(n_agents, bool) or not isinstance(n_agents, (int, np.integer)) or n_agents < 2:
        raise ValueError(f"n_agents={n_agents!r}: must be an integer >= 2")
    if roles is not None and len(roles) != n_agents:
        raise ValueError(f"roles={list(roles)!r} has {len(roles)} entries, n_agents is {n_agents}")
    n = int(n_agents)
    acts = np.full(n, CommAction.SOLO_PROCESS, dtype=np.int64)
    if name == "full":
        acts[:] = CommAction.BROADCAST_ALL
    elif name == "chain":
        acts[: n - 1] = CommAction.EXECUTE_VERIFY
    elif name == "star":
        acts[analyzer_index(n, roles)] = CommAction.AGGREGATE_REFINE
    elif name == "debate":
        acts[:] = CommAction.DEBATE_CHECK
    return acts


def open_loop_actions(name: str, n_agents: int, rounds: int, roles: Sequence[str] | None = None) -> np.ndarray:
    """The (T, N) action array of a fixed baseline, for :meth:`CommBatchSimulator.run`.

    ``random`` is not open loop in this sense and raises ValueError.
    """
    if isinstance(rounds, bool) or not isinstance(rounds, (int, np.integer)) or rounds < 1:
        raise ValueError(f"rounds={rounds!r}: must be an integer >= 1")
    joint = fixed_joint_action(name, n_agents, roles)
    return np.tile(joint, (int(rounds), 1))


class FixedTopologyPolicy:
    """Plays :func:`fixed_joint_action` of its baseline every round. ``roles``: the team's role
    kinds (for ``star``'s analyzer; None: the last agent is the analyzer, as in the default team)."""

    privileged = False

    def __init__(self, name: str, roles: Sequence[str] | None = None):
        fixed_joint_action(name, 2)  # validates the name
        self.name = name
        self.roles = None if roles is None else tuple(roles)

    def reset(self, seed: int | None) -> None:
        """Nothing to reset: the policy is deterministic."""

    def act(self, observations: dict, infos: dict) -> dict[str, int]:
        """Raises ValueError if the env masks out an action this baseline needs."""
        n = len(self.roles) if self.roles is not None else len(observations)
        joint = fixed_joint_action(self.name, n, self.roles)
        actions: dict[str, int] = {}
        for agent, obs in observations.items():
            a = int(joint[agent_index(agent)])
            if not obs["action_mask"][a]:
                raise ValueError(
                    f"baseline {self.name!r} needs action {ACTION_NAMES[a]!r} for {agent}, but the env masks it out "
                    f"(action_mask {np.asarray(obs['action_mask']).tolist()}): drop it from disabled_actions"
                )
            actions[agent] = a
        return actions


class RandomPolicy:
    """Each agent picks uniformly among the actions its ``action_mask`` allows.

    ``reset(seed)`` restarts the generator: the same seed gives the same actions.
    """

    name = "random"
    privileged = False

    def __init__(self, seed: int | None = None):
        self.reset(seed)

    def reset(self, seed: int | None) -> None:
        self._rng = policy_rng("random", seed)

    def act(self, observations: dict, infos: dict) -> dict[str, int]:
        actions: dict[str, int] = {}
        for agent in observations:
            valid = np.flatnonzero(np.asarray(observations[agent]["action_mask"]))
            if valid.size == 0:
                raise ValueError(f"random policy: {agent} has no valid action (all masked out)")
            actions[agent] = int(self._rng.choice(valid))
        return actions


def random_joint_actions(seeds: Sequence[int], n_agents: int, rounds: int, valid: Sequence[int]) -> np.ndarray:
    """(B, T, N) the joint actions :class:`RandomPolicy` plays in the episodes ``seeds`` (its
    ``reset(seed)``) on a team whose agents may take the actions ``valid``: the random policy is
    open loop, so the batch simulator can play it on the same episodes."""
    choices = np.asarray(valid)
    out = np.empty((len(seeds), rounds, n_agents), dtype=np.int64)
    for b, seed in enumerate(seeds):
        rng = policy_rng("random", int(seed))
        for t in range(rounds):
            for i in range(n_agents):  # the draws RandomPolicy.act makes, in agent order
                out[b, t, i] = rng.choice(choices)
    return out


class SequencePolicy:
    """Plays a given open-loop sequence: ``sequences[key]`` is a (T, N) action array.

    With the key ``"all"`` every task gets the same sequence (the fixed oracle); with keys
    ``"easy" / "medium" / "hard"`` (or 0 / 1 / 2) the sequence depends on the task's difficulty
    bucket, a privilege only the bucket oracle has: such a policy is ``privileged`` and
    :func:`evaluate_policy` hands it the task through :meth:`reveal_task` before each episode.
    """

    def __init__(self, name: str, sequences: dict[str, np.ndarray]):
        self.name = name
        self.sequences = {k: np.asarray(v, dtype=np.int64) for k, v in sequences.items()}
        self.privileged = "all" not in self.sequences
        self._key: Any = "all"
        self._round = 0

    def reset(self, seed: int | None) -> None:
        """Back to round 0 (the sequence itself is deterministic)."""
        self._round = 0

    def reveal_task(self, task) -> None:
        """The bucket oracle's privilege: the episode's task (:func:`~topo_env.engine.tasks.task_bucket`)."""
        self._key = "all" if not self.privileged else task_bucket(task)

    def act(self, observations: dict, infos: dict) -> dict[str, int]:
        joint = self.sequences[self._key][self._round]
        self._round += 1
        return {agent: int(joint[agent_index(agent)]) for agent in observations}


def make_baseline(name: str, seed: int | None = None, roles: Sequence[str] | None = None) -> CommPolicy:
    """The baseline policy called ``name`` (one of :data:`BASELINES`); ``seed`` seeds ``random``;
    ``roles``: the team's role kinds (where ``star`` puts its hub; None: the default team's)."""
    _check_name(name)
    if name == "random":
        return RandomPolicy(seed)
    return FixedTopologyPolicy(name, roles)


def evaluate_policy(env, policy: CommPolicy, episodes: int, seed: int = 0, split: str = "eval",
                    progress: bool = True, tasks_in_order: bool = False) -> dict[str, Any]:
    """Run ``episodes`` full episodes of ``policy`` through the PettingZoo API.

    Episode k: ``env.reset(seed=seed + k, options={"split": split})`` and
    ``policy.reset(seed + k)``; with ``tasks_in_order`` it plays task k of the split (modulo its
    size: every task once before any twice) instead of a task drawn from the seed. Per-episode figures come from the env: the return (sum
    of the rewards of ``possible_agents[0]``; all agents share it), ``accuracy`` and
    ``team_tokens`` from the last step's infos, and ``density`` averaged over the infos of
    every step.

    Returns plain floats/ints: ``reward`` (mean return), ``reward_std`` (population std of
    the returns), ``accuracy``, ``tokens_per_task``, ``density`` (mean over rounds and
    episodes), ``episodes``.
    """
    check_evaluation(episodes, seed, split)
    episodes_played = [run_to_end(play_comm_episode(env, policy, int(seed) + k, split,
                                                    task=k if tasks_in_order else None))
                       for k in tqdm(range(int(episodes)), desc=f"evaluate {policy.name}", disable=not progress,
                                     file=sys.stderr)]
    return policy_figures(episodes_played)


def check_evaluation(episodes: Any, seed: Any, split: Any) -> None:
    """A ValueError naming a bad ``episodes`` (an integer >= 1), ``seed`` (an integer) or ``split``."""
    if isinstance(episodes, bool) or not isinstance(episodes, (int, np.integer)) or episodes < 1:
        raise ValueError(f"episodes={episodes!r}: must be an integer >= 1")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise ValueError(f"seed={seed!r}: must be an integer")
    if split not in SPLITS:
        raise ValueError(f"split={split!r}: must be one of {sorted(SPLITS)}")


class EpisodeFigures(NamedTuple):
    """One evaluated episode: its return (of ``possible_agents[0]``; all agents share it),
    accuracy and team tokens (last step's infos), density (mean over the steps' infos), the
    last step's infos of that agent, and the LLM calls it made (:func:`episode_calls`)."""

    reward: float
    accuracy: float
    tokens: float
    density: float
    last_info: dict
    calls: int = 0


def step_calls(infos: dict) -> int:
    """The team's agent calls in one step (the sum of every agent's ``infos[a]["calls"]``)."""
    return sum(int(info["calls"]) for info in infos.values())


def episode_calls(agent_calls: int, decision_calls: int = 1) -> int:
    """LLM calls of an episode whose agents made ``agent_calls`` calls: theirs plus the decision's,
    ``decision_calls``: the decision node's one (FinalRefer), 0 where the team decides by a vote or one
    agent's answer (``env.decision``, :attr:`topo_env.engine.decision.DecisionMode.calls`)."""
    return int(agent_calls) + int(decision_calls)


def env_decision_calls(env) -> int:
    """The LLM calls of one decision on ``env`` (a front-end, wrapped or not): its config's ``decision``."""
    return settings_decision(getattr(getattr(env, "unwrapped", env), "config", None)).calls


async def play_comm_episode(env, policy: CommPolicy, seed: int, split: str, step=None,
                            task: int | None = None) -> EpisodeFigures:
    """Episode ``seed`` of ``policy`` through the PettingZoo API: ``env.reset(seed=seed,
    options={"split": split})`` (with ``"task": task`` where given: that task index of the split),
    ``policy.reset(seed)``, then steps until the episode ends.
    ``step``: a coroutine function twin of ``env.step`` (an env's ``astep``, for episodes in
    flight on one event loop); None calls ``env.step`` (nothing awaited: :func:`run_to_end`)."""
    options = {"split": split} if task is None else {"split": split, "task": int(task)}
    observations, infos = env.reset(seed=seed, options=options)
    policy.reset(seed)
    if getattr(policy, "privileged", False):  # user policies may leave the flag out
        policy.reveal_task(env.unwrapped.task)
    first = env.possible_agents[0]
    episode_return, episode_density, agent_calls, done = 0.0, [], 0, False
    while not done:
        actions = policy.act(observations, infos)
        observations, rewards, terminations, truncations, infos = (
            env.step(actions) if step is None else await step(actions))
        agent_calls += step_calls(infos)
        episode_return += float(rewards[first])
        episode_density.append(float(infos[first]["density"]))
        done = all(terminations.values()) or all(truncations.values()) or not env.agents
    return EpisodeFigures(episode_return, float(infos[first]["accuracy"]), float(infos[first]["team_tokens"]),
                          float(np.mean(episode_density)), infos[first],
                          episode_calls(agent_calls, env_decision_calls(env)))


def policy_figures(episodes: Sequence[EpisodeFigures]) -> dict[str, Any]:
    """:func:`evaluate_policy`'s summary of evaluated episodes (in episode order)."""
    returns = [e.reward for e in episodes]
    return {
        "reward": float(np.mean(returns)),
        "reward_std": float(np.std(returns)),
        "accuracy": float(np.mean([e.accuracy for e in episodes])),
        "tokens_per_task": float(np.mean([e.tokens for e in episodes])),
        "density": float(np.mean([e.density for e in episodes])),
        "calls_per_task": float(np.mean([e.calls for e in episodes])),
        "episodes": len(episodes),
    }


def evaluate_open_loop(name: str, profile: str, episodes: int, rounds: int | None = None, n_agents: int = 3,
                       seed: int = 0, **simulator_options: Any) -> dict[str, Any]:
    """Score a fixed baseline with the vectorised :class:`~topo_env.sim.batch.BatchSimulator`.

    Tasks and noise for ``episodes`` episodes come from ``CommBatchSimulator.sample`` with
    ``np.random.default_rng(seed)``; ``simulator_options`` go to the simulator (roles,
    adversarial_agents, target_rule, w_acc, w_tok, max_tokens). Returns the keys of
    :func:`evaluate_policy`.
    """
    from topo_env.frontends.comm_batch import CommBatchSimulator  # local: keeps the env import light

    if isinstance(episodes, bool) or not isinstance(episodes, (int, np.integer)) or episodes < 1:
        raise ValueError(f"episodes={episodes!r}: must be an integer >= 1")
    rounds = default_rounds(profile) if rounds is None else rounds
    sim = CommBatchSimulator(get_profile(profile), n_agents, rounds, **simulator_options)
    tasks, noise = sim.sample(np.random.default_rng(seed), int(episodes))
    result = sim.run(open_loop_actions(name, n_agents, rounds, sim.roles), tasks, noise)
    return {
        "reward": float(result.reward.mean()),
        "reward_std": float(result.reward.std()),
        "accuracy": float(result.accuracy.mean()),
        "tokens_per_task": float(result.tokens.mean()),
        "density": float(result.density.mean()),
        "episodes": int(episodes),
    }


__all__ = [
    "BASELINES", "DEFAULT_ROUNDS", "FIXED_BASELINES", "FixedTopologyPolicy", "CommPolicy", "RandomPolicy",
    "analyzer_index", "default_rounds", "evaluate_open_loop", "evaluate_policy", "fixed_joint_action",
    "SequencePolicy", "agent_index", "make_baseline", "open_loop_actions",
]
