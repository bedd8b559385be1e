"""Rolling out B episodes at once on the simulated team: the batched :class:`learners.runner.EpisodeRunner`.

:class:`BatchEpisodeRunner` plays B episodes of a :class:`~topo_env.frontends.vector_env.SimVectorEnv` with
the agent network: one forward pass per round for all of them, actions chosen by
:func:`~learners.runner.select_actions_batch`. Episode b of ``run(seeds, ...)`` is the PettingZoo
env's episode ``seeds[b]`` (same task, noise, adversaries; the same outcome for the same actions),
and a batch of one with the episode's exploration generator is :meth:`EpisodeRunner.run` exactly
(``tests/test_batch_runner.py``). What it returns goes into the same replay
(:meth:`learners.buffer.EpisodeReplayBuffer.add_batch`).

With ``privileged=True`` each round's global state carries, after the env's state, what the
simulator knows and a real team never shows (:meth:`SimVectorEnv.privileged`: subject, difficulty,
hidden latent, adversaries, blind spots). The state only feeds the QMIX mixer during training;
the agent networks, and so the executed policy, read observations only.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from learners.agent_network import AgentQNetwork
from learners.runner import EpisodeStats, select_actions_batch, topology_library
from topo_env.references.baselines import episode_calls
from topo_env.frontends.vector_env import SimVectorEnv


@dataclass
class EpisodeBatch:
    """B finished episodes in the replay's layout (:class:`learners.buffer.ReplayEpisode`'s fields
    with a leading batch dimension): ``obs`` (B, T, N, D), ``state`` (B, T, S), ``adjacency`` (B,
    T, N, N) float32 (the graph seen before round t), ``mask`` (B, T, N, A) bool, ``actions`` (B,
    T, N) int64, ``reward`` (B, T) float32, ``terminated`` (B, T) bool, and ``policy_version``."""

    obs: np.ndarray
    state: np.ndarray
    adjacency: np.ndarray
    mask: np.ndarray
    actions: np.ndarray
    reward: np.ndarray
    terminated: np.ndarray
    return_target: np.ndarray
    policy_version: int = 0

    def __len__(self) -> int:
        return len(self.reward)

    def take(self, rows: slice | np.ndarray) -> "EpisodeBatch":
        """The episodes ``rows`` of this batch."""
        return EpisodeBatch(self.obs[rows], self.state[rows], self.adjacency[rows], self.mask[rows],
                            self.actions[rows], self.reward[rows], self.terminated[rows], self.return_target[rows],
                            self.policy_version)


@dataclass
class BatchStats:
    """What B episodes did, for logs and evaluation tables (:class:`learners.runner.EpisodeStats`
    per column): ``reward`` (B,) returns, ``accuracy`` (B,), ``tokens`` (B,) team tokens with the
    decision node's, ``density`` (B,) mean over rounds, ``actions`` (B, T, N), ``graphs`` (B, T, N,
    N) int8 the rounds' graphs (``graphs[b, t, u, v] = 1``: u -> v in round t), ``targets`` (B, T,
    N), ``buckets`` the tasks' difficulty buckets, ``q_values`` (B, T, N) Q of the chosen actions,
    ``calls`` (B,) LLM calls (agents and decision node), ``adversaries`` (B, N) bool (``targets`` and
    ``adversaries`` None where the one-episode runner's stats were stacked: it does not keep them)."""

    reward: np.ndarray
    accuracy: np.ndarray
    tokens: np.ndarray
    density: np.ndarray
    actions: np.ndarray
    graphs: np.ndarray
    targets: np.ndarray | None
    buckets: tuple[str | None, ...]
    q_values: np.ndarray
    calls: np.ndarray
    adversaries: np.ndarray | None

    @classmethod
    def of_episodes(cls, episodes: Sequence[EpisodeStats]) -> "BatchStats":
        """The one-episode runner's :class:`~learners.runner.EpisodeStats`, stacked."""
        def column(name: str) -> np.ndarray:
            return np.array([getattr(e, name) for e in episodes])

        return cls(column("reward"), column("accuracy"), column("tokens"), column("density"), column("actions"),
                   column("adjacency"), None, tuple(e.bucket for e in episodes), column("q_values"), column("calls"),
                   None)


class BatchEpisodeRunner:
    """Plays B episodes of ``venv`` with ``agent``: observe, pick actions, step, record."""

    def __init__(self, venv: SimVectorEnv, agent: AgentQNetwork, device: torch.device | str = "cpu",
                 privileged: bool = False):
        self.venv, self.agent, self.device, self.privileged = venv, agent, torch.device(device), privileged
        self.topologies = topology_library(venv.n_agents, venv.config.roles)

    @property
    def state_dim(self) -> int:
        """S of the recorded global state: the env's, plus the privileged features when on."""
        extra = self.venv.privileged_dim if self.privileged else 0
        return self.venv.state_dim + extra

    def run(self, seeds: Sequence[int], epsilon: float | np.ndarray, rng: np.random.Generator, split: str = "train",
            team_explore: float = 0.0, deviation_explore: float = 0.0, deviation_rank_decay: float = 1.0,
            topology_explore: float = 0.0, policy_version: int = 0, noise_samples: int = 0,
            noise_rng: np.random.Generator | None = None, gamma: float = 1.0) -> tuple[EpisodeBatch, BatchStats]:
        """The episodes ``seeds`` of ``split``; ``epsilon`` (a number or (B,)) and the exploration
        shares as in :func:`~learners.runner.select_actions_batch`, drawn from ``rng`` (epsilon 0:
        greedy); ``policy_version`` is stored with the episodes.

        ``noise_samples`` = M > 0 (training only): before each round t, M copies of every episode are
        forked with fresh noise for the rounds still to play (:meth:`SimVectorEnv.fork`, drawn from
        ``noise_rng``), play round t's chosen joint action and then the greedy policy to the end;
        the mean of their returns from round t (discounted by ``gamma``) is the episode's
        ``return_target[:, t]``: Q of (observation, joint action) under greedy play, estimated on M
        samples of the noise instead of one."""
        venv, n, t_len = self.venv, self.venv.n_agents, self.venv.rounds
        self.agent.eval()
        step = venv.reset(seeds, split)
        b = len(seeds)
        privileged = venv.privileged() if self.privileged else None
        hidden = self.agent.initial_hidden(b, n)
        obs, states, adjacency, masks, actions, rewards, q_taken, targets = [], [], [], [], [], [], [], []
        return_target = np.zeros((b, t_len), dtype=np.float32)
        rows, agents = np.arange(b)[:, None], np.arange(n)[None, :]
        for t in range(t_len):
            seen = step.sent_to.astype(np.float32)
            with torch.no_grad():
                q, hidden = self.agent(torch.as_tensor(step.observations, device=self.device),
                                       torch.as_tensor(seen, device=self.device), hidden)
            q = q.cpu().numpy()
            mask = np.asarray(step.action_mask, dtype=bool)
            chosen = select_actions_batch(q, mask, epsilon, rng, team_explore, deviation_explore, deviation_rank_decay,
                                          topology_explore, self.topologies if topology_explore > 0.0 else None)
            if noise_samples:
                forked = venv.fork(noise_samples, noise_rng)
                returns = self._greedy_returns(forked, np.repeat(chosen, noise_samples, axis=0),
                                               hidden.repeat_interleave(noise_samples, dim=0), gamma)
                return_target[:, t] = returns.reshape(b, noise_samples).mean(axis=1)
            obs.append(step.observations)
            states.append(step.state if privileged is None else np.concatenate([step.state, privileged], axis=1))
            adjacency.append(seen)
            masks.append(mask)
            actions.append(chosen)
            q_taken.append(q[rows, agents, chosen])
            step = venv.step(chosen)
            rewards.append(step.rewards)
            targets.append(step.targets)
        result = venv.result
        terminated = np.zeros((b, t_len), dtype=bool)
        terminated[:, -1] = True
        batch = EpisodeBatch(np.stack(obs, axis=1), np.stack(states, axis=1).astype(np.float32),
                             np.stack(adjacency, axis=1), np.stack(masks, axis=1), np.stack(actions, axis=1),
                             np.stack(rewards, axis=1).astype(np.float32), terminated, return_target,
                             int(policy_version))
        returns = np.zeros(b)
        for r in rewards:  # in round order, as the one-episode runner sums its rewards
            returns = returns + r
        graphs = result.adjacency.astype(np.int8)
        stats = BatchStats(returns, result.accuracy, result.tokens,
                           (graphs.sum(axis=(2, 3)) / (n * (n - 1))).mean(axis=1), batch.actions, graphs,
                           np.stack(targets, axis=1), venv.episodes.buckets, np.stack(q_taken, axis=1),
                           result.calls.sum(axis=(1, 2)) + episode_calls(0, result.decision_calls), venv.episodes.adversaries)
        return batch, stats

    def _greedy_returns(self, venv: SimVectorEnv, actions: np.ndarray, hidden: torch.Tensor, gamma: float) -> np.ndarray:
        """(B,) discounted returns of ``venv``'s episodes from now on: this round's ``actions`` (B, N),
        then the agent network's greedy joint actions (GRU state ``hidden`` after this round's
        observations) until the episodes end."""
        step = venv.step(actions)
        returns, discount = step.rewards.copy(), 1.0
        while not step.terminated:
            with torch.no_grad():
                q, hidden = self.agent(torch.as_tensor(step.observations, device=self.device),
                                       torch.as_tensor(step.sent_to.astype(np.float32), device=self.device), hidden)
            greedy = np.where(step.action_mask, q.cpu().numpy(), -np.inf).argmax(axis=2)
            step = venv.step(greedy)
            discount *= gamma
            returns = returns + discount * step.rewards
        return returns
