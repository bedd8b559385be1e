"""Rolling out episodes with the agent network: the same code for training (epsilon-greedy)
and evaluation (greedy, epsilon = 0)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from learners.agent_network import AgentQNetwork
from learners.buffer import ReplayEpisode
from topo_env.references.baselines import (
    FIXED_BASELINES, env_decision_calls, episode_calls, fixed_joint_action, step_calls,
)
from topo_env.engine.episode import run_to_end
from topo_env.frontends.parallel_env import TopologyParallelEnv


def pick_in_rows(allowed: np.ndarray, u: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
    """Per row of ``allowed`` (..., K) bool, the index k of the allowed entry that the uniform draw
    ``u`` (...) falls on when the allowed entries, in order, cover [0, 1) in shares ``weights[k] /
    sum`` (default: equal shares: the ``min(floor(u * count), count - 1)``-th allowed entry). Rows
    with nothing allowed give -1."""
    w = allowed.astype(np.float64) if weights is None else np.where(allowed, weights, 0.0)
    total = w.sum(axis=-1)
    if weights is None:  # equal shares: integer arithmetic, no rounding at the boundaries
        count = total.astype(np.int64)
        nth = np.minimum((u * count).astype(np.int64), count - 1)
        pick = (np.cumsum(allowed, axis=-1) == (nth + 1)[..., None]) & allowed
    else:
        cdf = np.cumsum(w, axis=-1) / np.where(total > 0, total, 1.0)[..., None]
        nth = np.minimum(((cdf <= u[..., None]) & allowed).sum(axis=-1), allowed.sum(axis=-1) - 1)
        pick = (np.cumsum(allowed, axis=-1) == (nth + 1)[..., None]) & allowed
    return np.where(allowed.any(axis=-1), pick.argmax(axis=-1), -1)


def topology_library(n_agents: int, roles=None) -> np.ndarray:
    """(L, N) the joint actions of the fixed baselines (:data:`topo_env.references.baselines.FIXED_BASELINES`:
    solo, full, chain, star, debate) for a team of ``n_agents`` with ``roles``: what
    ``topology_explore`` draws from."""
    return np.stack([fixed_joint_action(name, n_agents, roles) for name in FIXED_BASELINES])


def select_actions(q: np.ndarray, mask: np.ndarray, epsilon: float, rng: np.random.Generator,
                   team_explore: float = 0.0, deviation_explore: float = 0.0,
                   deviation_rank_decay: float = 1.0, topology_explore: float = 0.0,
                   topologies: np.ndarray | None = None) -> np.ndarray:
    """Epsilon-greedy over valid actions only: q (N, A), mask (N, A) bool -> (N,) int;
    :func:`select_actions_batch` for one episode (the same draws from ``rng``)."""
    return select_actions_batch(q[None], mask[None], epsilon, rng, team_explore, deviation_explore,
                                deviation_rank_decay, topology_explore, topologies)[0]


def select_actions_batch(q: np.ndarray, mask: np.ndarray, epsilon: float | np.ndarray, rng: np.random.Generator,
                         team_explore: float = 0.0, deviation_explore: float = 0.0,
                         deviation_rank_decay: float = 1.0, topology_explore: float = 0.0,
                         topologies: np.ndarray | None = None) -> np.ndarray:
    """Epsilon-greedy over valid actions only, for B episodes: q (B, N, A), mask (B, N, A) bool,
    ``epsilon`` a number or (B,) per episode -> (B, N) int64.

    Each agent explores with probability epsilon (uniform over its valid actions), else takes
    its best valid action. The draws from ``rng`` do not depend on the Q-values: with any
    exploration share > 0, two per episode (B each: which kind of round, and a pick), then two
    per agent (B x N each: whether it explores, and its pick); for B = 1 the same stream as one
    episode's draws in that order, so a batch of one is the one-episode loop.

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
    agents differ (one aggregator, a chain) are tried as often as uniform ones.
    """
    b, n, n_actions = q.shape
    epsilon = np.broadcast_to(np.asarray(epsilon, dtype=np.float64), (b,))
    greedy = np.where(mask, q, -np.inf).argmax(axis=2)  # (B, N)
    team_round = deviation_round = topology_round = np.zeros(b, dtype=bool)
    shares = team_explore > 0.0 or deviation_explore > 0.0 or topology_explore > 0.0
    if shares:
        round_draw = rng.random(b)
        round_pick = rng.random(b)
        team_round = round_draw < epsilon * team_explore
        deviation_round = ~team_round & (round_draw < epsilon * (team_explore + deviation_explore))
        topology_round = (~team_round & ~deviation_round
                          & (round_draw < epsilon * (team_explore + deviation_explore + topology_explore)))
        epsilon = epsilon * (1.0 - team_explore - deviation_explore - topology_explore)
    explore = rng.random((b, n)) < epsilon[:, None]
    picks = rng.random((b, n))
    actions = greedy.copy()
    coordinated = np.zeros(b, dtype=bool)  # rows whose whole joint action is a team or topology round's
    if team_round.any():
        shared = pick_in_rows(mask.all(axis=1), round_pick)  # (B,): -1 where no action is valid for all
        teams = team_round & (shared >= 0)
        actions[teams] = shared[teams, None]
        coordinated |= teams
        explore[team_round & (shared < 0)] = True  # no action valid for all: everyone explores alone
    if topology_round.any():
        if topologies is None:
            raise ValueError("topology_explore > 0 needs the topologies to explore (an (L, N) array)")
        playable = mask[:, np.arange(n)[:, None], np.asarray(topologies).T].all(axis=1)  # (B, L)
        chosen = pick_in_rows(playable, round_pick)
        played = topology_round & (chosen >= 0)
        actions[played] = np.asarray(topologies)[chosen[played]]
        coordinated |= played
        explore[topology_round & (chosen < 0)] = True  # none playable: everyone explores alone
    alone = ~coordinated & ~deviation_round
    if deviation_round.any():
        who = np.minimum((round_pick * n).astype(np.int64), n - 1)  # the deviating agent, uniformly
        d = np.flatnonzero(deviation_round)
        i = who[d]
        others = mask[d, i] & (np.arange(n_actions)[None, :] != greedy[d, i][:, None])  # (D, A)
        if deviation_rank_decay == 1.0:
            alternative = pick_in_rows(others, picks[d, i])
        else:  # best first, by the agent's own Q-values (ties in action order)
            order = np.argsort(-np.where(others, q[d, i], -np.inf), axis=1, kind="stable")
            ranked = np.take_along_axis(others, order, axis=1)
            k = pick_in_rows(ranked, picks[d, i], deviation_rank_decay ** np.maximum(np.cumsum(ranked, axis=1) - 1, 0))
            alternative = np.where(k >= 0, np.take_along_axis(order, np.maximum(k, 0)[:, None], axis=1)[:, 0], -1)
        moved = alternative >= 0
        actions[d[moved], i[moved]] = alternative[moved]
    explore &= alone[:, None]
    if explore.any():
        r, i = np.nonzero(explore)
        actions[r, i] = pick_in_rows(mask[r, i], picks[r, i])
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
    calls: int = 0  # LLM calls: the agents' and the decision node's (topo_env.references.baselines.episode_calls)


def space_dims(env: TopologyParallelEnv) -> tuple[int, int]:
    """(D, S): an agent's observation length and the global state's, read from the env's spaces."""
    return int(env.observation_space(env.possible_agents[0])["observation"].shape[0]), int(env.state_space.shape[0])


class EpisodeRunner:
    """Plays one episode of ``env`` with ``agent``: observe, pick actions, step, record."""

    def __init__(self, env: TopologyParallelEnv, agent: AgentQNetwork, device: torch.device):
        self.env, self.agent, self.device = env, agent, device
        self.names = list(env.possible_agents)
        self.topologies = topology_library(env.n_agents, env.config.roles)

    def run(self, epsilon: float, rng: np.random.Generator, seed: int | None = None,
            options: dict | None = None, team_explore: float = 0.0, deviation_explore: float = 0.0,
            deviation_rank_decay: float = 1.0, policy_version: int = 0,
            topology_explore: float = 0.0) -> tuple[ReplayEpisode, EpisodeStats]:
        """One episode; ``epsilon`` and the exploration shares as in :func:`select_actions`
        (epsilon 0: greedy); ``policy_version`` is stored in the record."""
        return run_to_end(self._play(epsilon, rng, seed, options, team_explore, deviation_explore,
                                     deviation_rank_decay, policy_version, topology_explore, step=None))

    async def arun(self, epsilon: float, rng: np.random.Generator, seed: int | None = None,
                   options: dict | None = None, team_explore: float = 0.0, deviation_explore: float = 0.0,
                   deviation_rank_decay: float = 1.0, policy_version: int = 0,
                   topology_explore: float = 0.0) -> tuple[ReplayEpisode, EpisodeStats]:
        """:meth:`run` as a coroutine (through the env's
        :meth:`~topo_env.frontends.parallel_env.TopologyParallelEnv.astep`), for episodes in flight on one event loop
        (:mod:`topo_env.frontends.inflight`)."""
        return await self._play(epsilon, rng, seed, options, team_explore, deviation_explore, deviation_rank_decay,
                                policy_version, topology_explore, step=self.env.astep)

    async def _play(self, epsilon, rng, seed, options, team_explore, deviation_explore, deviation_rank_decay,
                    policy_version, topology_explore, step) -> tuple[ReplayEpisode, EpisodeStats]:
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
        record = ReplayEpisode(
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
            bucket=env.episode_summary()["bucket"], q_values=np.stack(q_taken), calls=episode_calls(agent_calls, env_decision_calls(env)),
        )
        return record, stats
