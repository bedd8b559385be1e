"""# topomarl_v0: the PettingZoo ParallelEnv

N LLM agents solve one task together in ``rounds`` communication rounds; each round every agent
picks how it communicates (one of six CommActions), the joint action becomes the round's graph, the
team answers and the decision node (FinalRefer) gives the final answer after the last round. The
reward trades accuracy against tokens (Agent Q-Mix Eq. 12).

| Import             | ``from topo_env import parallel_env``  (``env = parallel_env(**env_keys)``)     |
|--------------------|---------------------------------------------------------------------------------|
| Actions            | Discrete                                                                        |
| Parallel API       | Yes (``is_parallelizable``; ``astep`` for episodes in flight on one event loop) |
| Agents             | ``agents = ["agent_0", ..., "agent_{N-1}"]``, N = ``n_agents`` (default 3)      |
| Action Shape       | ``Discrete(6)``                                                                 |
| Action Values      | 0 solo_process, 1 broadcast_all, 2 selective_query, 3 aggregate_refine,         |
|                    | 4 execute_verify, 5 debate_check (:mod:`topo_env.frontends.comm_actions`)       |
| Observation Shape  | ``Dict(observation=Box(float32, (D,)), action_mask=Box(0, 1, (6,), int8))``     |
| State Shape        | ``Box(float32, (S,))`` (``state()``, the QMIX mixer's input)                    |

## Arguments

Keyword arguments equal the YAML ``env:`` keys (:class:`~topo_env.frontends.env_config.EnvConfig`
documents each): ``n_agents``, ``rounds``, ``profile``, ``domain``, ``backend`` (``sim`` or ``{kind:
llm, model, base_url, dataset, ...}``), ``roles``, ``personas``, ``team``, ``adversarial_agents``,
``adversary_position``, ``n_adversaries``, ``w_acc``, ``w_tok``, ``max_tokens``, ``reward_mode``,
``target_rule``, ``encoder``, ``embed_dim``, ``disabled_actions``, ``split``, ``render_mode``,
``descriptors``. A bad value raises one :class:`~topo_env.engine.config_checks.ConfigError` line
naming it.

## Action space

Each round the joint action becomes a directed graph (:func:`~topo_env.frontends.comm_graph.build_adjacency`;
``A[u, v] = 1``: u's output reaches v before v answers), with selective_query and debate_check
pointed at a peer by ``target_rule`` (:mod:`topo_env.frontends.targets`), and so a
:class:`~topo_env.engine.episode.RoundSpec` (everyone active, execute_verify agents verified) that
the episode engine (:class:`~topo_env.engine.episode.TeamEpisode`) runs in SCC layers. Actions in
``disabled_actions`` are 0 in every ``action_mask``; sending one raises a ValueError.

## Observation space

Agent i's ``observation`` (:mod:`topo_env.frontends.observation`): the task text's embedding and
length, i's id, role and persona, the round, i's previous action, its and the team's tokens, last
round's degrees, agreement with the team, last confidence and verifier verdict. Adversaries are
not marked. ``state()``: all observations, the last graph and the round.

## Rewards

``R = w_acc * accuracy - w_tok * min(tokens_used / max_tokens, 1)`` (defaults 1.25 and 0.10).
``reward_mode="sparse"`` pays R to every agent at the last round (0 before); ``"shaped"`` charges the
token penalty round by round (the decision node's tokens in the last round) and pays
``w_acc * accuracy`` at the end: the per-round rewards sum to the same return.

## Episode end

After the last round the task is answered: ``terminations`` are True for every agent (a true
terminal state: no bootstrapping past it), ``truncations`` stay False, and ``env.agents == []``.

## Infos

Every step, per agent (:data:`INFO_KEYS`): ``calls`` and ``round_tokens`` (this round), ``team_tokens``,
``edges``, ``density``, ``accuracy`` (0 until the decision), ``target`` (the peer its query or
debate pointed at, -1 before round 1), ``in_degree``, ``out_degree``, ``tokens_estimated``
(1 where a server gave no usage), ``sent_to`` (its row of the round's graph). Once the episode
has ended, ``env.episode_summary()`` says what it was (``task_id``, ``subject``, ``bucket``,
``adversaries``), for scoring and analysis; before the end it raises.

## Reset

``reset(seed=..., options={"task": Task | int, "split": "train" | "eval", "adversaries": [i, ...]})``:
an int task picks that index of the split; ``adversaries`` forces the episode's adversary set
(``[]``: none). With the simulated team, seed and options determine the episode completely.

## Version history

* v0: six CommActions and Eq. 12 as in Agent Q-Mix; a RoundSpec engine under both front-ends,
  personas and a persona block in the observation, random adversary placement, ``astep`` for
  episodes in flight, ``sent_to`` in the infos, ``episode_summary()`` after the end.
"""
from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces
from pettingzoo import ParallelEnv

from topo_env.frontends.comm_actions import ACTION_NAMES, N_ACTIONS, CommAction
from topo_env.engine.team_backend import TeamBackend
from topo_env.engine.backend_registry import make_backend, sibling_backend
from topo_env.frontends.env_config import EnvConfig
from topo_env.frontends.encoders import make_encoder
from topo_env.engine.episode import RewardConfig, RoundSpec, TeamEpisode, episode_transcript
from topo_env.engine.executor import RoundResult
from topo_env.frontends.shared import EngineFrontEnd, begin_episode, render_picture
from topo_env.frontends.comm_graph import adjacency_of
from topo_env.engine.plan import degrees
from topo_env.frontends.observation import ObservationBuilder, answer_codes
from topo_env.frontends.targets import choose_targets_one
from topo_env.engine.tasks import Task

INFO_KEYS: tuple[str, ...] = (
    "calls", "round_tokens", "team_tokens", "edges", "density", "accuracy",
    "target", "in_degree", "out_degree", "tokens_estimated", "sent_to",
)
"""The keys of every agent's infos at every step."""


def comm_round_spec(actions: list[int], targets: list[int]) -> RoundSpec:
    """The :class:`~topo_env.engine.episode.RoundSpec` a validated joint action makes: the graph of
    :func:`~topo_env.frontends.comm_graph.build_adjacency` with these targets, everyone active, and the
    ``execute_verify`` agents verified."""
    n = len(actions)
    verify = np.array([a == CommAction.EXECUTE_VERIFY for a in actions], dtype=bool)
    return RoundSpec(adjacency_of(actions, targets).view(bool), np.ones(n, dtype=bool), verify)


@dataclass
class CommRound(RoundResult):
    """One round of the PettingZoo env: the engine's :class:`~topo_env.engine.executor.RoundResult` with
    the joint action that made it and the targets its selective_query / debate_check resolved to."""

    actions: tuple[int, ...]
    targets: tuple[int, ...]


def parallel_env(**config: Any) -> "TopologyParallelEnv":
    """A :class:`TopologyParallelEnv` from keyword arguments equal to the YAML env keys."""
    return TopologyParallelEnv(EnvConfig.from_dict(config))


class TopologyParallelEnv(EngineFrontEnd, ParallelEnv):
    """N LLM agents choose, each round, how they communicate (the module docstring is the card:
    spaces, arguments, rewards, infos).

    ``adversaries``: the sorted agent indices playing adversaries this episode (config
    ``adversary_position``: fixed, or drawn per episode from its seeded RNG after the task and
    noise, so the same seed gives the same task with or without adversaries). Neither the
    observations nor the infos show it before the last step: a policy must tell an adversary from
    its behaviour. ``config`` (the env's :class:`EnvConfig`) is its public spec; ``task``,
    ``history``, ``backend`` and ``episode`` are for the env's own views (render, transcript,
    traces), not for policies.
    """

    metadata = {"name": "topomarl_v0", "render_modes": ["ansi", "rgb_array", "human"], "is_parallelizable": True,
                "render_fps": 1}

    def __init__(self, config: EnvConfig | None = None, backend: TeamBackend | None = None, encoder: Any = None):
        self.config = config or EnvConfig()
        cfg = self.config
        self.render_mode = cfg.render_mode
        self.n_agents, self.rounds = cfg.n_agents, cfg.rounds
        self.possible_agents = [f"agent_{i}" for i in range(cfg.n_agents)]
        self.agents: list[str] = []
        self._index = {name: i for i, name in enumerate(self.possible_agents)}
        self.backend = backend if backend is not None else make_backend(cfg)
        self.encoder = encoder if encoder is not None else make_encoder(cfg.encoder, None if cfg.encoder == "minilm"
                                                                         else cfg.embed_dim)
        self.obs_builder = ObservationBuilder(cfg.n_agents, cfg.rounds, cfg.roles, self.encoder.dim, cfg.max_tokens,
                                              cfg.personas)
        self.episode = TeamEpisode(self.backend, cfg.roles, cfg.rounds,
                                   RewardConfig(cfg.w_acc, cfg.w_tok, cfg.max_tokens, cfg.reward_mode))
        self.adversaries: tuple[int, ...] = tuple(sorted(cfg.adversarial_agents))
        mask = np.ones(N_ACTIONS, dtype=np.int8)
        mask[list(cfg.disabled_actions)] = 0
        self._mask = mask
        d = self.obs_builder.dim
        self._obs_space = spaces.Dict(
            {
                "observation": spaces.Box(-np.inf, np.inf, shape=(d,), dtype=np.float32),
                "action_mask": spaces.Box(0, 1, shape=(N_ACTIONS,), dtype=np.int8),
            }
        )
        self._act_space = spaces.Discrete(N_ACTIONS)
        self.state_space = spaces.Box(-np.inf, np.inf, shape=(self.obs_builder.state_dim,), dtype=np.float32)
        self._rng: np.random.Generator | None = None
        self._ended = True
        self.history: list[CommRound] = []
        self._set_adjacency(np.zeros((cfg.n_agents, cfg.n_agents), dtype=np.int8))
        self._specs: dict[tuple[tuple[int, ...], tuple[int, ...]], RoundSpec] = {}

    def sibling(self) -> "TopologyParallelEnv":
        """Another env of the same config for another episode in flight: its own backend (its
        own episode state) sharing this one's connections, e.g. one LLM client and its
        concurrency limit (:func:`topo_env.engine.backend_registry.sibling_backend`)."""
        env = TopologyParallelEnv(self.config, backend=sibling_backend(self.backend, self.config), encoder=self.encoder)
        env.episode.record(self.episode.trace_path)
        return env

    # -- spaces (same object every call) -------------------------------------------------
    def observation_space(self, agent: str) -> spaces.Space:
        self._agent_index(agent)
        return self._obs_space

    def action_space(self, agent: str) -> spaces.Space:
        self._agent_index(agent)
        return self._act_space

    # -- episode -------------------------------------------------------------------------
    def reset(self, seed: int | None = None, options: dict | None = None):
        """Start an episode. A reset that raises changes nothing (episode, task, RNG)."""
        rng = np.random.default_rng(seed) if (seed is not None or self._rng is None) else self._rng
        self._template = begin_episode(self.episode, self.config, self.encoder, self.obs_builder, rng, options)
        self._rng = rng
        self.adversaries = self.episode.adversaries
        n = self.n_agents
        self.agents = list(self.possible_agents)
        self._ended = False
        self.history = []
        self._set_adjacency(np.zeros((n, n), dtype=np.int8))
        self._prev_actions: tuple[int, ...] | None = None
        self._obs = self._observe()
        infos = self._infos(calls=[0] * n, round_tokens=[0] * n, targets=[-1] * n, estimated=False)
        return self._obs_dict(), infos

    def step(self, actions: dict[str, Any]):
        return self.episode.run_coroutine(self.astep(actions))

    async def astep(self, actions: dict[str, Any]):
        """:meth:`step` as a coroutine, awaited on the caller's event loop: several envs (see
        :meth:`sibling`) then play episodes at once against one server. ``reset`` stays sync."""
        if self._ended:
            raise RuntimeError("step() called after the episode ended; call reset() first")
        acts = self._validate(actions)
        n = self.n_agents
        episode = self.episode
        if self._prev_actions is None:
            targets = choose_targets_one(self.config.target_rule, None, None, n)
        else:
            previous = episode.last_outputs
            codes = answer_codes([m.answer for m in previous])
            confs = [0.5 if m.confidence is None else m.confidence for m in previous]
            targets = choose_targets_one(self.config.target_rule, codes, confs, n)
        key = (tuple(acts), tuple(targets))
        spec = self._specs.get(key)
        if spec is None:  # specs are immutable: one per (joint action, targets), built once
            spec = self._specs[key] = comm_round_spec(acts, targets)
        result = await episode.arun_round(spec)
        self.history.append(CommRound(**vars(result), actions=key[0], targets=key[1]))
        round_tokens = result.agent_tokens
        estimated = result.tokens_estimated
        self._prev_actions = tuple(acts)
        self._set_adjacency(result.adjacency)
        last = episode.round == self.rounds
        if last:
            await episode.adecide()
            estimated = estimated or episode.decision.reply.tokens_estimated
        reward = episode.step_reward()
        self._obs = self._observe()
        obs = self._obs_dict()
        infos = self._infos(calls=result.agent_calls, round_tokens=round_tokens, targets=list(targets),
                            estimated=estimated)
        rewards = {a: reward for a in self.agents}
        terminations = {a: last for a in self.agents}
        truncations = {a: False for a in self.agents}
        if last:
            self._ended = True
            self.agents = []
        return obs, rewards, terminations, truncations, infos

    # -- the episode, read through the engine --------------------------------------------
    @property
    def task(self) -> Task | None:
        return self.episode.task

    @property
    def round(self) -> int:
        """Rounds played so far in this episode."""
        return self.episode.round

    @property
    def accuracy(self) -> float:
        return self.episode.accuracy

    @property
    def decision(self):
        return self.episode.decision

    # -- views ---------------------------------------------------------------------------
    def state(self) -> np.ndarray:
        if self._rng is None:
            raise RuntimeError("state() called before reset()")
        return self.obs_builder.state(self._obs, self.adjacency, self.round)

    def render(self) -> str | np.ndarray | None:
        """``ansi``: the transcript; ``rgb_array``: the last round's topology picture, (H, W, 3)
        uint8; ``human``: that picture in a window, or saved as a PNG where no display exists."""
        if self.render_mode is None:
            gymnasium.logger.warn("render() called with render_mode=None; create the env with render_mode='ansi'")
            return None
        if self.render_mode == "ansi":
            return self.transcript()
        return render_picture(self.render_mode, self.adjacency, self.episode, self.config.roles, self._rng is not None,
                              f"topomarl_round{self.round}.png")

    def transcript(self) -> str:
        """The episode so far, round by round: plan, messages, answers, tokens."""
        if self._rng is None:
            return ""
        labels = [", ".join(f"agent_{i}={ACTION_NAMES[a]}" for i, a in enumerate(r.actions)) for r in self.history]
        return episode_transcript(self.episode, labels)

    # -- internals -----------------------------------------------------------------------
    def _agent_index(self, agent: str) -> int:
        try:
            return self._index[agent]
        except (KeyError, TypeError):
            raise ValueError(f"unknown agent {agent!r}; agents are {self.possible_agents}") from None

    def _validate(self, actions: dict[str, Any]) -> list[int]:
        if not isinstance(actions, dict):
            raise ValueError(f"actions must be a dict agent -> action, got {type(actions).__name__}")
        for name in actions:
            self._agent_index(name)
        missing = [a for a in self.agents if a not in actions]
        if missing:
            raise ValueError(f"missing action for agent(s) {missing}")
        acts = []
        for name in self.possible_agents:
            a = actions[name]
            if isinstance(a, np.ndarray) and a.shape == ():
                a = a.item()
            if isinstance(a, bool) or not isinstance(a, numbers.Integral):
                raise ValueError(f"action of {name} is {a!r}: must be an integer 0..{N_ACTIONS - 1}")
            a = int(a)
            if not 0 <= a < N_ACTIONS:
                raise ValueError(f"action of {name} is {a}: outside 0..{N_ACTIONS - 1}")
            if not self._mask[a]:
                raise ValueError(f"action of {name} is {a} ({ACTION_NAMES[a]}), which is masked out (disabled_actions)")
            acts.append(a)
        return acts

    def _set_adjacency(self, adjacency: np.ndarray) -> None:
        """The graph of the last round (zeros before round 1) and its degrees."""
        self.adjacency = adjacency
        self._in_degree, self._out_degree = degrees(adjacency)
        self._edges = sum(self._out_degree)

    def _observe(self) -> np.ndarray:
        episode = self.episode
        prev = episode.last_outputs
        return self.obs_builder.build(
            self._template, episode.round, self._prev_actions, episode.agent_tokens,
            episode.team_tokens, self._in_degree, self._out_degree,
            [m.answer if m else None for m in prev], [m.confidence if m else None for m in prev],
            [int(m.verdict) if m else 0 for m in prev],
        )

    def _obs_dict(self) -> dict[str, dict[str, np.ndarray]]:
        return {
            name: {"observation": self._obs[i], "action_mask": self._mask.copy()}
            for i, name in enumerate(self.possible_agents)
        }

    def _infos(self, calls, round_tokens, targets, estimated: bool) -> dict[str, dict]:
        n = self.n_agents
        edges = int(self._edges)
        dens = edges / (n * (n - 1))
        ins, outs = self._in_degree, self._out_degree
        return {
            name: {
                "calls": int(calls[i]),
                "round_tokens": int(round_tokens[i]),
                "team_tokens": int(self.episode.team_tokens),
                "edges": edges,
                "density": dens,
                "accuracy": float(self.accuracy),
                "target": int(targets[i]),
                "in_degree": int(ins[i]),
                "out_degree": int(outs[i]),
                "tokens_estimated": int(estimated),
                "sent_to": self.adjacency[i].copy(),
            }
            for i, name in enumerate(self.possible_agents)
        }
