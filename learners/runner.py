"""Rolling out episodes with the agent network: the same code for training (epsilon-greedy)
and evaluation (greedy, epsilon = 0)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from learners.agent_network import AgentQNetwork
from learners.buffer import EpisodeRecord
from topo_env.baselines import FIXED_BASELINES, episode_calls, fixed_joint_action, step_calls
from topo_env.engine import run_to_end
from topo_env.env import TopologyParallelEnv


def pick_uniform(values: np.ndarray, u: float):
    """The element of ``values`` that a uniform draw ``u`` in [0, 1) falls on."""
    return values[min(int(u * len(values)), len(values) - 1)]


def pick_weighted(values: np.ndarray, weights: np.ndarray, u: float):
    """The element of ``values`` that a uniform draw ``u`` in [0, 1) falls on when element k
    covers a share ``weights[k] / sum(weights)`` of [0, 1), in order."""
    cdf = np.cumsum(weights) / weights.sum()
    return values[min(int(np.searchsorted(cdf, u, side="right")), len(values) - 1)]


def topology_library(n_agents: int, roles=None) -> np.ndarray:
    """(L, N) the joint actions of the fixed baselines (:data:`topo_env.baselines.FIXED_BASELINES`:
    solo, full, chain, star, debate) for a team of ``n_agents`` with ``roles``: what
    ``topology_explore`` draws from."""
    return np.stack([fixed_joint_action(name, n_agents, roles) for name in FIXED_BASELINES])


def select_actions(q: np.ndarray, mask: np.ndarray, epsilon: float, rng: np.random.Generator,
                   team_explore: float = 0.0, deviation_explore: float = 0.0,
                   deviation_rank_decay: float = 1.0, topology_explore: float = 0.0,
                   topologies: np.ndarray | None = None) -> np.ndarray:
    """Epsilon-greedy over valid actions only: q (N, A), mask (N, A) bool -> (N,) int.

    Each agent explores with probability epsilon (uniform over its valid actions), else takes
    its best valid action. Two draws per agent from ``rng`` whatever the outcome, so the
    random stream does not depend on the Q-values.

    ``team_explore`` and ``deviation_explore`` (each 0..1, sum <= 1) split the exploration by
    rounds. With probability ``epsilon * team_explore`` the whole team explores at once: every
    agent takes one shared action drawn uniformly from the actions valid for all of them. With
    probability ``epsilon * deviation_explore`` one agent, drawn uniformly, deviates alone: it
    takes a valid action other than its greedy one while its teammates play greedy: drawn
    uniformly, or with ``deviation_rank_decay`` < 1 with weight ``decay ** k`` for its k-th best
    (by ``q``; ties in action order). Otherwise each agent explores alone with probability
    ``epsilon * (1 - team_explore - deviation_explore)``. Independent exploration almost never
    plays a coordinated joint action (1 in 6^(N-1)), so the Q-value of an action is learned
    against teammates acting at random; team rounds show what it is worth when the others join in, and deviation rounds
    what one agent's own action is worth next to the greedy team (a local search around it,
    which reaches joint actions where agents differ). ``topology_explore`` (with ``topologies``,
    (L, N) joint actions, e.g. the fixed baselines' :func:`topology_library`) is a third share:
    with probability ``epsilon * topology_explore`` the team plays one of the L named topologies,
    drawn uniformly (where all its actions are valid), so that coordinated joint actions in which
    agents differ (one aggregator, a chain) are tried as often as uniform ones. With any share > 0
    two more draws per round are made.
    """
    n = q.shape[0]
    greedy = np.where(mask, q, -np.inf).argmax(axis=1)
    team_round = deviation_round = topology_round = False
    if team_explore > 0.0 or deviation_explore > 0.0 or topology_explore > 0.0:
        round_draw = rng.random()
        round_pick = rng.random()
        team_round = round_draw < epsilon * team_explore
        deviation_round = not team_round and round_draw < epsilon * (team_explore + deviation_explore)
        topology_round = (not team_round and not deviation_round
                          and round_draw < epsilon * (team_explore + deviation_explore + topology_explore))
        epsilon = epsilon * (1.0 - team_explore - deviation_explore - topology_explore)
    explore = rng.random(n) < epsilon
    picks = rng.random(n)
    if team_round:
        shared = np.flatnonzero(mask.all(axis=0))
        if len(shared):
            return np.full(n, pick_uniform(shared, round_pick), dtype=greedy.dtype)
        explore[:] = True  # no action valid for all: everyone explores alone this round
    if topology_round:
        if topologies is None:
            raise ValueError("topology_explore > 0 needs the topologies to explore (an (L, N) array)")
        playable = [t for t in topologies if mask[np.arange(n), t].all()]
        if playable:
            return np.array(pick_uniform(np.asarray(playable), round_pick), dtype=greedy.dtype)
        explore[:] = True  # none playable: everyone explores alone this round
    actions = greedy.copy()
    if deviation_round:
        i = pick_uniform(np.arange(n), round_pick)
        others = np.flatnonzero(mask[i] & (np.arange(mask.shape[1]) != greedy[i]))
        if len(others) and deviation_rank_decay == 1.0:
            actions[i] = pick_uniform(others, picks[i])
        elif len(others):  # best first, by the agent's own Q-values
            ranked = others[np.argsort(-q[i, others], kind="stable")]
            actions[i] = pick_weighted(ranked, deviation_rank_decay ** np.arange(len(ranked)), picks[i])
        return actions
    for i in np.flatnonzero(explore):
        valid = np.flatnonzero(mask[i])
        actions[i] = pick_uniform(valid, picks[i])
    return actions


@dataclass
class EpisodeStats:
    """What one episode did, for logs and evaluation tables."""

    reward: float
    accuracy: float
    tokens: int
    density: float  # mean over rounds
    actions: np.ndarray  # (T, N)
    adjacency: np.ndarray  # (T, N, N) graphs of the rounds
    bucket: str | None
    q_values: np.ndarray  # (T, N) Q of the chosen actions
    calls: int = 0  # LLM calls: the agents' and the decision node's (topo_env.baselines.episode_calls)


class EpisodeRunner:
    """Plays one episode of ``env`` with ``agent``: observe, pick actions, step, record."""

    def __init__(self, env: TopologyParallelEnv, agent: AgentQNetwork, device: torch.device):
        self.env, self.agent, self.device = env, agent, device
        self.names = list(env.possible_agents)
        self.topologies = topology_library(env.n_agents, env.config.roles)

    def run(self, epsilon: float, rng: np.random.Generator, seed: int | None = None,
            options: dict | None = None, team_explore: float = 0.0, deviation_explore: float = 0.0,
            deviation_rank_decay: float = 1.0, policy_version: int = 0,
            topology_explore: float = 0.0) -> tuple[EpisodeRecord, EpisodeStats]:
        """One episode; ``epsilon`` and the exploration shares as in :func:`select_actions`
        (epsilon 0: greedy); ``policy_version`` is stored in the record."""
        return run_to_end(self._play(epsilon, rng, seed, options, team_explore, deviation_explore,
                                     deviation_rank_decay, policy_version, topology_explore, step=None))

    async def arun(self, epsilon: float, rng: np.random.Generator, seed: int | None = None,
                   options: dict | None = None, team_explore: float = 0.0, deviation_explore: float = 0.0,
                   deviation_rank_decay: float = 1.0, policy_version: int = 0,
                   topology_explore: float = 0.0) -> tuple[EpisodeRecord, EpisodeStats]:
        """:meth:`run` as a coroutine (through the env's
        :meth:`~topo_env.env.TopologyParallelEnv.astep`), for episodes in flight on one event loop
        (:mod:`learners.inflight`)."""
        return await self._play(epsilon, rng, seed, options, team_explore, deviation_explore, deviation_rank_decay,
                                policy_version, topology_explore, step=self.env.astep)

    async def _play(self, epsilon, rng, seed, options, team_explore, deviation_explore, deviation_rank_decay,
                    policy_version, topology_explore, step) -> tuple[EpisodeRecord, EpisodeStats]:
        """The episode; ``step``: ``env.astep`` (awaited), or None for ``env.step`` (nothing awaited)."""
        env, n, t_len = self.env, len(self.names), self.env.rounds
        self.agent.eval()  # greedy or not, rollouts never use training-mode layers
        obs_dict, infos = env.reset(seed=seed, options=options)
        hidden = self.agent.initial_hidden(1, n)
        rec = {k: [] for k in ("obs", "state", "adjacency", "mask", "actions", "reward", "terminated")}
        q_taken = []
        rewards = {}
        agent_calls = 0
        for _ in range(t_len):
            obs = np.stack([obs_dict[a]["observation"] for a in self.names])
            mask = np.stack([obs_dict[a]["action_mask"] for a in self.names]).astype(bool)
            adjacency = np.stack([infos[a]["sent_to"] for a in self.names]).astype(np.float32)
            rec["state"].append(env.state())
            with torch.no_grad():
                q, hidden = self.agent(torch.as_tensor(obs, device=self.device)[None],
                                       torch.as_tensor(adjacency, device=self.device)[None], hidden)
            q = q[0].cpu().numpy()
            actions = select_actions(q, mask, epsilon, rng, team_explore, deviation_explore, deviation_rank_decay,
                                     topology_explore, self.topologies if topology_explore > 0.0 else None)
            joint = {a: int(actions[i]) for i, a in enumerate(self.names)}
            obs_dict, rewards, terms, _, infos = env.step(joint) if step is None else await step(joint)
            agent_calls += step_calls(infos)
            rec["obs"].append(obs)
            rec["adjacency"].append(adjacency)
            rec["mask"].append(mask)
            rec["actions"].append(actions)
            rec["reward"].append(rewards[self.names[0]])
            rec["terminated"].append(terms[self.names[0]])
            q_taken.append(q[np.arange(n), actions])
        record = EpisodeRecord(
            obs=np.stack(rec["obs"]).astype(np.float32), state=np.stack(rec["state"]).astype(np.float32),
            adjacency=np.stack(rec["adjacency"]), mask=np.stack(rec["mask"]), actions=np.stack(rec["actions"]),
            reward=np.array(rec["reward"], np.float32), terminated=np.array(rec["terminated"], bool),
            policy_version=int(policy_version),
        )
        info = infos[self.names[0]]
        graphs = np.stack(rec["adjacency"][1:] + [np.stack([infos[a]["sent_to"] for a in self.names])]).astype(np.int8)
        stats = EpisodeStats(
            reward=float(sum(rec["reward"])), accuracy=float(info["accuracy"]), tokens=int(info["team_tokens"]),
            density=float(graphs.mean(axis=(1, 2)).mean() * n / (n - 1)), actions=record.actions, adjacency=graphs,
            bucket=env.task.metadata.get("bucket"), q_values=np.stack(q_taken), calls=episode_calls(agent_calls),
        )
        return record, stats
