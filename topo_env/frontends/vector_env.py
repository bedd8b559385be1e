"""The PettingZoo env for B episodes at once, played by the batch simulator (simulated team only).

    from topo_env.frontends.vector_env import SimVectorEnv
    venv = SimVectorEnv(EnvConfig())                      # any EnvConfig with backend "sim"
    step = venv.reset(seeds=range(1024), split="train")   # VectorStep: observations (B, N, D), ...
    while not venv.done:
        step = venv.step(actions)                         # (B, N) CommActions

Episode b of ``reset(seeds)`` is the episode ``TopologyParallelEnv.reset(seed=seeds[b],
options={"split": split})`` plays: the same task, the same noise, the same adversaries, drawn from
the same seeded generator in the same order. For the same joint actions it gives the same
observations, global states, graphs, rewards, tokens and calls as the PettingZoo env
(``tests/test_vector_env.py`` checks episode by episode), only B episodes per call: the rounds run
in :class:`~topo_env.sim.batch.BatchSimulator` and the observations are built by
:meth:`~topo_env.frontends.observation.ObservationBuilder.build_batch`. This is the path of training at
simulator scale (:mod:`learners.batch_runner`, JaxMARL / EnvPool style); the one-episode env stays
the reference and the path of LLM teams.

:meth:`SimVectorEnv.privileged` exposes what the simulator knows and a real team does not (the
tasks' hidden variables and the adversaries): for training-time use only, e.g. in the QMIX mixer's
state; a policy that is executed must never read it.
"""
from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from topo_env.frontends.comm_actions import N_ACTIONS
from topo_env.frontends.env_config import EnvConfig
from topo_env.frontends.encoders import make_encoder
from topo_env.engine.backend_registry import BATCH_SIMULATOR, backend_offers
from topo_env.engine.episode import RewardConfig
from topo_env.frontends.observation import ObservationBuilder
from topo_env.sim.batch import BatchResult, BatchState, TaskArrays
from topo_env.frontends.comm_batch import CommBatchSimulator, comm_round_specs
from topo_env.sim.model import EpisodeNoise, draw_noise
from topo_env.sim.profiles import get_profile
from topo_env.sim.tasks import SimTaskSource
from topo_env.frontends.targets import choose_targets
from topo_env.engine.tasks import Task, task_bucket


@dataclass(frozen=True)
class VectorStep:
    """What B agents' teams see before a round (or after the last one).

    ``observations`` (B, N, D) float32 and ``action_mask`` (B, N, A) bool: the PettingZoo env's
    ``obs[agent]["observation"]`` / ``["action_mask"]`` stacked in agent order; ``sent_to`` (B, N,
    N) int8: last round's graph (``sent_to[b, u, v] = 1``: u's output reached v; zeros before
    round 1), the env's ``infos[agent]["sent_to"]`` stacked; ``state`` (B, S) float32: ``env.state()``;
    ``rewards`` (B,): the step's reward (0 at reset); ``calls`` (B, N): each agent's calls this
    round; ``targets`` (B, N): the peer each agent's selective_query / debate_check pointed at this
    round (the env's ``infos[agent]["target"]``; -1 at reset); ``terminated``: True after the last
    round."""

    observations: np.ndarray
    action_mask: np.ndarray
    sent_to: np.ndarray
    state: np.ndarray
    rewards: np.ndarray
    calls: np.ndarray
    targets: np.ndarray
    terminated: bool


@dataclass(frozen=True)
class VectorEpisodes:
    """The B episodes a :meth:`SimVectorEnv.reset` started: their tasks for the batch simulator,
    noise, (B, N) bool adversaries, and of the :class:`~topo_env.engine.tasks.Task` objects what the
    studies read: ``buckets`` (difficulty bucket names) and ``texts`` (the task texts the agents'
    observations embed)."""

    tasks: TaskArrays
    noise: EpisodeNoise
    adversaries: np.ndarray
    buckets: tuple[str, ...]
    texts: tuple[str, ...]


class SimVectorEnv:
    """B episodes of :class:`~topo_env.frontends.parallel_env.TopologyParallelEnv` (simulated team) stepped together.

    ``reset(seeds, split)`` starts them, ``step(actions)`` plays one round of (B, N) CommActions;
    after the last round :attr:`result` holds the batch simulator's outcome (reward, accuracy,
    tokens, graphs, calls). Rewards follow the config's ``reward_mode`` as the env pays them.
    """

    def __init__(self, config: EnvConfig | None = None, encoder: Any = None):
        self.config = cfg = config or EnvConfig()
        if not backend_offers(cfg.backend, BATCH_SIMULATOR):
            raise ValueError(f"SimVectorEnv plays the simulated team (a backend the batch simulator runs); backend kind "
                             f"{cfg.backend.kind!r} is "
                             "played one episode at a time by topo_env.frontends.parallel_env.TopologyParallelEnv")
        self.n_agents, self.rounds = cfg.n_agents, cfg.rounds
        self.profile = get_profile(cfg.backend.profile)
        self.sim = CommBatchSimulator.from_config(cfg, self.profile)
        self.tasks = SimTaskSource(self.profile, cfg.train_tasks)
        self.encoder = encoder if encoder is not None else make_encoder(cfg.encoder, None if cfg.encoder == "minilm"
                                                                         else cfg.embed_dim)
        self.obs_builder = ObservationBuilder(cfg.n_agents, cfg.rounds, cfg.roles, self.encoder.dim, cfg.max_tokens,
                                              cfg.personas)
        self.observation_dim, self.state_dim = self.obs_builder.dim, self.obs_builder.state_dim  # D and S
        self.reward = RewardConfig(cfg.w_acc, cfg.w_tok, cfg.max_tokens, cfg.reward_mode)
        mask = np.ones(N_ACTIONS, dtype=bool)
        mask[list(cfg.disabled_actions)] = False
        self._mask = mask
        self.episodes: VectorEpisodes | None = None
        self.result: BatchResult | None = None
        self._state: BatchState | None = None

    # -- episodes ------------------------------------------------------------------------
    def sample_episodes(self, seeds: Sequence[int], split: str | None = None,
                      task_indices: Sequence[int] | None = None) -> tuple[VectorEpisodes, list[Task]]:
        """The tasks, noise and adversaries of the PettingZoo env's episodes ``seeds`` (its
        ``reset(seed=s, options={"split": split})``, or with ``task_indices`` ``options={"task": i,
        ...}``), drawn exactly as the env draws them, and the Task objects."""
        split = split or self.config.split
        cfg, profile = self.config, self.profile
        tasks, noises = [], []
        adversaries = np.zeros((len(seeds), self.n_agents), dtype=bool)
        for b, seed in enumerate(seeds):
            rng = np.random.default_rng(int(seed))
            task = (self.tasks.sample(rng, split) if task_indices is None
                    else self.tasks.task(split, int(task_indices[b])))
            noises.append(draw_noise(rng, profile, 1, self.rounds, self.n_agents))
            adversaries[b, list(cfg.draw_adversaries(rng))] = True
            tasks.append(task)
        episodes = VectorEpisodes(TaskArrays.from_tasks(tasks), EpisodeNoise.concatenate(noises), adversaries,
                                  tuple(task_bucket(t) for t in tasks), tuple(t.prompt for t in tasks))
        return episodes, tasks

    def reset(self, seeds: Sequence[int], split: str | None = None,
              task_indices: Sequence[int] | None = None) -> VectorStep:
        """Start episodes ``seeds`` (see :meth:`sample_episodes`); returns the first observations."""
        episodes, tasks = self.sample_episodes(seeds, split, task_indices)
        embeddings = np.stack([self.encoder.encode(t.prompt) for t in tasks])
        self._templates = self.obs_builder.episode_templates(embeddings, episodes.tasks.prompt_tokens)
        return self.start(episodes)

    def start(self, episodes: VectorEpisodes, templates: np.ndarray | None = None) -> VectorStep:
        """Start the given episodes (e.g. the same ones again, with other actions: common random
        numbers); ``templates`` their observation templates (default: those of the last reset)."""
        if templates is not None:
            self._templates = templates
        b = len(episodes.buckets)
        if self._templates.shape[0] != b:
            raise ValueError(f"{b} episodes but {self._templates.shape[0]} observation templates")
        self.episodes = episodes
        self.result = None
        self._state = self.sim.initial_state(b, episodes.adversaries)
        self._prev_actions: np.ndarray | None = None
        self._paid = np.zeros(b)
        n = self.n_agents
        return self._observe(np.zeros((b, n, n), np.int8), np.zeros(b), np.zeros((b, n), np.int64),
                             np.full((b, n), -1, np.int64))

    def fork(self, copies: int, rng: np.random.Generator) -> "SimVectorEnv":
        """A new vector env holding ``copies`` replicas of every current episode (episode b's at rows
        ``b * copies ... (b + 1) * copies - 1``), at the same point: the rounds played so far and
        their outputs are kept, the noise of the rounds still to play and of the decision node is
        drawn afresh from ``rng``. Before round 1 the replicas are the same observable task (text,
        subject, difficulty, length, adversaries) with a fresh hidden latent and fresh blind spots
        too: other tasks that read the same. Replicas let training average a return over the
        simulator's noise (training only: a real team cannot replay its randomness)."""
        if self._state is None or self.done:
            raise RuntimeError("fork() needs episodes with rounds still to play")
        e, played = self.episodes, self._state.round
        b = len(e.buckets)
        rows = np.repeat(np.arange(b), copies)
        fresh = draw_noise(rng, self.profile, b * copies, self.rounds, self.n_agents)
        calls = e.noise.calls[rows]
        calls[:, played:] = fresh.calls[:, played:]
        tasks = e.tasks.take(rows)
        blind = e.noise.blind[rows]
        if played == 0:
            tasks = TaskArrays(tasks.difficulty, rng.standard_normal(b * copies), tasks.prompt_tokens, tasks.subject)
            blind = fresh.blind
        forked = copy.copy(self)
        forked.episodes = VectorEpisodes(tasks, EpisodeNoise(calls, fresh.decision, blind), e.adversaries[rows],
                                         tuple(e.buckets[r] for r in rows), tuple(e.texts[r] for r in rows))
        forked._templates = self._templates[rows]
        forked._state = self._state.take(rows)
        forked._prev_actions = None if self._prev_actions is None else self._prev_actions[rows]
        forked._paid = self._paid[rows]
        forked.result = None
        return forked

    @property
    def done(self) -> bool:
        """Whether every round of the current episodes has been played."""
        return self._state is None or self._state.round == self.rounds

    @property
    def round(self) -> int:
        """Rounds played so far in the current episodes."""
        return 0 if self._state is None else self._state.round

    def step(self, actions: np.ndarray) -> VectorStep:
        """One round of (B, N) CommActions for every episode (targets resolved per episode from
        last round, as the env resolves them)."""
        if self.done:
            raise RuntimeError("step() after the last round; call reset() first")
        state = self._state
        acts = np.asarray(actions, dtype=np.int64)
        b = state.tokens.shape[0]
        if acts.shape != (b, self.n_agents):
            raise ValueError(f"actions must have shape (B, N) = {(b, self.n_agents)}, got {acts.shape}")
        if not self._mask[acts].all():
            bad = int(acts[~self._mask[acts]][0])
            raise ValueError(f"action {bad} is masked out (disabled_actions)")
        e = self.episodes
        prev = state.previous
        targets = np.ascontiguousarray(np.broadcast_to(
            choose_targets(self.config.target_rule, None if prev is None else prev.label,
                           None if prev is None else prev.conf, self.n_agents), (b, self.n_agents)))
        state = self.sim.run_spec(state, comm_round_specs(acts, targets), e.tasks, e.noise)
        self._state = state
        self._prev_actions = acts
        graph = state.adjacency[-1]
        if state.round == self.rounds:
            self.result = self.sim.finish(state, e.tasks, e.noise)
            tokens, accuracy = self.result.tokens, self.result.accuracy
        else:
            tokens, accuracy = state.tokens, np.zeros(b)
        ended = np.full(b, state.round == self.rounds)
        rewards, self._paid = self.reward.step_rewards(accuracy, tokens, ended, self._paid)
        return self._observe(graph, rewards, state.calls[-1], targets)

    # -- views ---------------------------------------------------------------------------
    def _observe(self, graph: np.ndarray, rewards: np.ndarray, calls: np.ndarray, targets: np.ndarray) -> VectorStep:
        state = self._state
        prev = state.previous
        b, n = graph.shape[:2]
        if prev is None:
            codes, conf, verdict = np.full((b, n), -1), np.zeros((b, n)), np.zeros((b, n), np.int64)
        else:
            codes, conf, verdict = prev.label, prev.conf, prev.verdict
        obs = self.obs_builder.build_batch(self._templates, state.round, self._prev_actions, state.agent_tokens,
                                           self.team_tokens, graph.sum(axis=1), graph.sum(axis=2), codes, conf, verdict)
        return VectorStep(obs, np.broadcast_to(self._mask, (b, n, N_ACTIONS)), graph.astype(np.int8),
                          self.obs_builder.state_batch(obs, graph, state.round), np.asarray(rewards, np.float64),
                          np.asarray(calls), targets, state.round == self.rounds)

    @property
    def agent_tokens(self) -> np.ndarray:
        """(B, N) every agent's tokens so far in the current episodes (the decision node's not counted)."""
        return self._state.agent_tokens

    @property
    def team_tokens(self) -> np.ndarray:
        """(B,) the team's tokens so far, the env's ``infos[agent]["team_tokens"]``: the decision node's
        tokens count once the episodes ended."""
        return self.result.tokens if self.result is not None else self._state.tokens

    @property
    def last_outputs(self):
        """The agents' last outputs (:class:`~topo_env.sim.batch.Outputs`: (B, N) answer labels, 0
        the correct one, 1 the trap; confidences; verdicts), None before round 1. Labels are the
        simulator's: what a real team's answers are only known as (equal or not): training only."""
        return None if self._state is None else self._state.previous

    def privileged(self) -> np.ndarray:
        """(B, P) float32 what the simulator knows of the current episodes and a real team never
        shows (training only): the subject one-hot (S), the difficulty, the hidden latent, the
        adversary mask (N) and the agents' blind spots (N). P = :meth:`privileged_dim`."""
        e = self.episodes
        subjects = len(self.profile.subjects)
        out = np.zeros((len(e.buckets), self.privileged_dim), dtype=np.float32)
        out[np.arange(len(e.buckets)), e.tasks.subject] = 1.0
        out[:, subjects] = e.tasks.difficulty
        out[:, subjects + 1] = e.tasks.latent
        out[:, subjects + 2 : subjects + 2 + self.n_agents] = e.adversaries
        out[:, subjects + 2 + self.n_agents :] = e.noise.blind
        return out

    @property
    def privileged_dim(self) -> int:
        """P of :meth:`privileged`: subjects + 2 + 2 N."""
        return len(self.profile.subjects) + 2 + 2 * self.n_agents
