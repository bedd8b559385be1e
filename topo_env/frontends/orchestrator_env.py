"""# topomarl_orchestrator_v0: the Gymnasium env for central controllers

| Import             | ``from topo_env import orchestrator_env``  (``env = orchestrator_env(mode=..., **env_keys)``) |
|--------------------|------------------------------------------------------------------------------------------------|
| Actions            | ``mode="graph"``: Dict (a whole round); ``mode="next_agent"``: Discrete(N + 1)                |
| Agents             | one controller for a team of N = ``n_agents`` LLM agents                                       |
| Observation Shape  | ``Dict(task=Box((E + 1,)), agents=Box((N, F)), adjacency=MultiBinary((N, N)), round=Discrete(T + 1))`` |
| Arguments          | ``mode`` and the YAML ``env:`` keys (:class:`~topo_env.frontends.env_config.EnvConfig`; the same as the PettingZoo env's) |
| Version history    | v0: graph and next_agent modes, recalls, ``halt``, ``outputs`` and ``task_text`` in the infos, ``episode_summary()`` after the end |

ONE central controller designs each round.

The PettingZoo env (:mod:`topo_env.frontends.parallel_env`) lets every agent pick one of six CommActions; here a
single controller (DyTopo's matcher, AgentConductor's DAG writer, Puppeteer's policy, TacoMAS's
editor, or yours) chooses the whole round. Both front-ends drive the same episode engine
(:class:`~topo_env.engine.episode.TeamEpisode`) with :class:`~topo_env.engine.episode.RoundSpec` rounds, so a
graph scores the same whichever front-end chose it.

Modes (``orchestrator_env(mode=...)``):

* ``"graph"`` (default). Action ``Dict(adjacency=MultiBinary((N, N)), active=MultiBinary(N),
  verify=MultiBinary(N), halt=Discrete(2), recall=MultiBinary((N, N)))``: ``adjacency[u, v] = 1``
  sends u's output to v this round; ``active`` says who is called; ``verify`` whose output goes
  through the domain's verifier; ``halt = 1`` makes this round the last (the decision node answers
  after it); ``recall`` (optional: a dict without it recalls nothing) ``recall[u, v] = 1`` also
  shows v u's latest output from an earlier round (a layered DAG's reference to an earlier step;
  recalls from an agent that has not spoken yet are dropped). Every action of the space is valid:
  the diagonals are ignored, and an agent that sends, receives, recalls or is verified is called
  even if its ``active`` bit is 0. A round with nobody called changes nothing but the round count.
  Up to ``rounds`` rounds; the last one halts whatever ``halt`` says.
* ``"next_agent"`` (Puppeteer's sequential form). Action ``Discrete(N + 1)``: agent k < N speaks
  next, alone, shown the latest output of every agent that has spoken so far (RoundSpec ``recall``
  edges); k = N stops and the decision node answers (before anyone spoke: from the task alone). Up
  to ``rounds`` steps (``rounds`` counts calls of single agents here).

Observation ``Dict``: ``task`` Box((E + 1,)) (task-text embedding and log task length),
``agents`` Box((N, F)) (per agent: role, persona, tokens, last in/out degree, agreement, last
confidence and verdict, has run, was active; :meth:`ObservationBuilder.controller_view`),
``adjacency`` MultiBinary((N, N)) (last round's edges, recalls included), ``round`` Discrete(T + 1)
(rounds run so far).

Reward, termination and bad input follow the PettingZoo env: Eq. 12 paid at the end (``sparse``)
or with the token penalty charged round by round (``shaped``); ``terminated`` is True once the
decision node answered, ``truncated`` is always False; an action outside the space raises a
ValueError naming it and changes nothing. ``info``: ``calls``, ``round_tokens``, ``in_degree``,
``out_degree`` (N arrays), ``team_tokens``, ``edges``, ``density``, ``accuracy``,
``tokens_estimated``, ``halted`` (1 when the episode ended before its last allowed round),
``task_text`` (the task's prompt, for controllers that prompt an LLM with it), ``outputs`` (per
agent: its latest output as ``{"text", "answer", "confidence", "verdict"}``, or
None before it spoke: what a controller that reads the agents' replies, such as DyTopo's, reads).
Once the episode has ended, ``env.episode_summary()`` says what it was (``task_id``, ``subject``,
``bucket``, ``adversaries``); before the end it raises.

``reset(seed, options)`` takes the PettingZoo env's options (``task``, ``split``,
``adversaries``); with the simulated team, seed and options fix the episode completely, and the
same seed gives the same task and noise in both front-ends.
"""
from __future__ import annotations

import numbers
from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces

from topo_env.engine.team_backend import TeamBackend
from topo_env.engine.backend_registry import make_backend, sibling_backend
from topo_env.frontends.env_config import EnvConfig
from topo_env.engine.config_checks import ConfigError
from topo_env.frontends.encoders import make_encoder
from topo_env.engine.episode import RewardConfig, RoundSpec, TeamEpisode, as_flags, episode_transcript
from topo_env.frontends.shared import EngineFrontEnd, begin_episode, render_picture
from topo_env.engine.plan import degrees
from topo_env.frontends.observation import ObservationBuilder

MODES: tuple[str, ...] = ("graph", "next_agent")


def orchestrator_env(mode: str = "graph", **config: Any) -> "OrchestratorEnv":
    """An :class:`OrchestratorEnv` from keyword arguments equal to the YAML env keys."""
    return OrchestratorEnv(EnvConfig.from_dict(config), mode=mode)


def graph_round(action: Any, ran: np.ndarray) -> tuple[np.ndarray, ...]:
    """A ``"graph"`` action as the round it runs, for one episode (``ran`` (N,): who has run) or for B
    at once (``ran`` (B, N); every entry of ``action`` then has a leading B axis, ``halt`` too).

    Returns bool arrays ``(adjacency, active, verify, recall, halt)`` (``recall`` None when the action
    has none): diagonals dropped, recalls from agents that have not run dropped, and every agent that
    sends, receives, recalls or is verified called. An action outside the space raises a ValueError
    naming the bad key or entry."""
    if not isinstance(action, dict) or set(action) - {"recall"} != {"adjacency", "active", "verify", "halt"}:
        got = sorted(action) if isinstance(action, dict) else type(action).__name__
        raise ValueError(f"action must be a dict with keys ['active', 'adjacency', 'halt', 'verify'] "
                         f"(and optionally 'recall'), got {got}")
    batch, n = ran.shape[:-1], ran.shape[-1]
    adjacency = as_flags("action['adjacency']", action["adjacency"], batch + (n, n))
    active = as_flags("action['active']", action["active"], batch + (n,))
    verify = as_flags("action['verify']", action["verify"], batch + (n,))
    halt = _halt_flags(action["halt"], batch)
    diagonal = np.arange(n)
    adjacency[..., diagonal, diagonal] = False
    recall = None
    if action.get("recall") is not None:
        recall = as_flags("action['recall']", action["recall"], batch + (n, n))
        recall[..., diagonal, diagonal] = False
        recall &= ran[..., :, None]  # only outputs that exist
    active = active | adjacency.any(axis=-2) | adjacency.any(axis=-1) | verify
    if recall is not None:
        active = active | recall.any(axis=-2)
    return adjacency, active, verify, recall, halt


def _halt_flags(halt: Any, batch: tuple[int, ...]) -> np.ndarray:
    """``action["halt"]``: 0 or 1 (an integer, not a bool), or with ``batch`` an integer array of that shape."""
    if not batch:
        if isinstance(halt, np.ndarray) and halt.shape == ():
            halt = halt.item()
        if isinstance(halt, bool) or not isinstance(halt, numbers.Integral) or halt not in (0, 1):
            raise ValueError(f"action['halt'] is {halt!r}: must be 0 or 1")
        return np.asarray(bool(halt))
    arr = np.asarray(halt)
    if arr.shape != batch or arr.dtype == bool or not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"action['halt'] is a {arr.dtype} array of shape {arr.shape}: must be integers 0 or 1 "
                         f"of shape {batch}")
    bad = (arr != 0) & (arr != 1)
    if bad.any():
        raise ValueError(f"action['halt'] holds {int(arr[bad][0])}: entries must be 0 or 1")
    return arr.astype(bool)


def next_agent_round(k: Any, ran: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A ``"next_agent"`` action ``k`` (an int, or (B,) ints with ``ran`` (B, N)) as who is called,
    (..., N) bool (agent k alone; nobody for k = N, the stop), and who recalls whom, (..., N, N) bool
    (k is shown the latest output of every other agent that has run)."""
    n = ran.shape[-1]
    active = np.eye(n + 1, n, dtype=bool)[k]
    recall = ran[..., :, None] & active[..., None, :]
    diagonal = np.arange(n)
    recall[..., diagonal, diagonal] = False
    return active, recall


class OrchestratorEnv(EngineFrontEnd, gymnasium.Env):
    """One central controller chooses every round of an LLM team (see the module docstring)."""

    metadata = {"name": "topomarl_orchestrator_v0", "render_modes": ["ansi", "rgb_array", "human"], "render_fps": 1}

    def __init__(self, config: EnvConfig | None = None, mode: str = "graph", backend: TeamBackend | None = None):
        if mode not in MODES:
            raise ConfigError(f"mode={mode!r}: must be one of {list(MODES)}")
        self.config = cfg = config or EnvConfig()
        if cfg.disabled_actions:
            raise ConfigError(f"disabled_actions={list(cfg.disabled_actions)!r} masks CommActions, which the "
                              "orchestrator env does not use; leave it empty")
        self.mode = mode
        self.render_mode = cfg.render_mode
        self.n_agents, self.rounds = n, t = cfg.n_agents, cfg.rounds
        self.backend = backend if backend is not None else make_backend(cfg)
        self.encoder = make_encoder(cfg.encoder, None if cfg.encoder == "minilm" else cfg.embed_dim)
        self.obs_builder = ObservationBuilder(n, t, cfg.roles, self.encoder.dim, cfg.max_tokens, cfg.personas)
        self.episode = TeamEpisode(self.backend, cfg.roles, t,
                                   RewardConfig(cfg.w_acc, cfg.w_tok, cfg.max_tokens, cfg.reward_mode))
        b = self.obs_builder
        self.observation_space = spaces.Dict({
            "task": spaces.Box(-np.inf, np.inf, shape=(b.task_dim,), dtype=np.float32),
            "agents": spaces.Box(-np.inf, np.inf, shape=(n, b.agent_feature_dim), dtype=np.float32),
            "adjacency": spaces.MultiBinary((n, n)),
            "round": spaces.Discrete(t + 1),
        })
        if mode == "graph":
            self.action_space = spaces.Dict({
                "adjacency": spaces.MultiBinary((n, n)),
                "active": spaces.MultiBinary(n),
                "verify": spaces.MultiBinary(n),
                "halt": spaces.Discrete(2),
                "recall": spaces.MultiBinary((n, n)),
            })
        else:
            self.action_space = spaces.Discrete(n + 1)
        self._started = False
        self._ended = True

    # -- episode -------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        """Start an episode. A reset that raises changes nothing (episode, task, RNG)."""
        super().reset(seed=seed)  # seeds self.np_random: the episode's generator
        template = begin_episode(self.episode, self.config, self.encoder, self.obs_builder, self.np_random, options)
        n = self.n_agents
        self._template = template
        self._started, self._ended = True, False
        self._set_last_round(np.zeros((n, n), dtype=np.int8), np.zeros(n, dtype=bool))
        zeros = [0] * n
        return self._observation(), self._info(zeros, zeros, halted=False)

    def sibling(self) -> "OrchestratorEnv":
        """Another env of the same config and mode for another episode in flight: its own backend
        (its own episode state) sharing this one's connections (one LLM client and its
        concurrency limit)."""
        return OrchestratorEnv(self.config, self.mode, backend=sibling_backend(self.backend, self.config))

    def step(self, action: Any):
        return self.episode.run_coroutine(self.astep(action))

    async def astep(self, action: Any):
        """:meth:`step` as a coroutine, awaited on the caller's event loop: several envs (see
        :meth:`sibling`) then play episodes at once against one server."""
        if self._ended:
            raise RuntimeError("step() called after the episode ended; call reset() first")
        episode = self.episode
        if self.mode == "graph":
            spec, halt = self._graph_round(action)
        else:
            k = self._next_agent(action)
            if k == self.n_agents:
                spec, halt = None, True
            else:
                active, recall = next_agent_round(k, np.asarray(episode.ran, dtype=bool))
                nobody = np.zeros(self.n_agents, dtype=bool)
                spec = RoundSpec(np.zeros((self.n_agents, self.n_agents), dtype=bool), active, nobody, recall)
                halt = False
        n = self.n_agents
        calls, round_tokens = [0] * n, [0] * n
        if spec is not None:
            result = await episode.arun_round(spec)
            calls, round_tokens = result.agent_calls, result.agent_tokens
            graph = spec.adjacency | spec.recall if spec.recall is not None else spec.adjacency
            self._set_last_round(graph.view(np.int8), spec.active)
        last = halt or episode.round == self.rounds
        if last:
            await episode.adecide()
            self._ended = True
        reward = episode.step_reward()
        info = self._info(calls, round_tokens, halted=last and episode.round < self.rounds)
        return self._observation(), reward, last, False, info

    # -- views ---------------------------------------------------------------------------
    def render(self):
        if self.render_mode is None:
            gymnasium.logger.warn("render() called with render_mode=None; create the env with render_mode='ansi'")
            return None
        if self.render_mode == "ansi":
            return self.transcript()
        return render_picture(self.render_mode, self._last_graph, self.episode, self.config.roles, self._started,
                              f"topomarl_orchestrator_round{self.episode.round if self._started else 0}.png")

    def transcript(self) -> str:
        """The episode so far, round by round (``render_mode="ansi"`` returns this)."""
        if not self._started:
            return ""
        if self.mode == "graph":  # the engine's own round labels: who was called and verified
            return episode_transcript(self.episode)
        speakers = [f"agent_{int(np.flatnonzero(r.spec.active)[0])} speaks" for r in self.episode.history]
        return episode_transcript(self.episode, speakers)

    # -- internals -----------------------------------------------------------------------
    def _graph_round(self, action: Any) -> tuple[RoundSpec, bool]:
        adjacency, active, verify, recall, halt = graph_round(action, np.asarray(self.episode.ran, dtype=bool))
        return RoundSpec(adjacency, active, verify, recall), bool(halt)

    def _next_agent(self, action: Any) -> int:
        if isinstance(action, np.ndarray) and action.shape == ():
            action = action.item()
        if isinstance(action, bool) or not isinstance(action, numbers.Integral) or not 0 <= action <= self.n_agents:
            raise ValueError(f"action is {action!r}: must be an agent index 0..{self.n_agents - 1} or "
                             f"{self.n_agents} (stop)")
        return int(action)

    def _set_last_round(self, graph: np.ndarray, active: np.ndarray) -> None:
        """The last round's edges (recalls included) and who was called, with their degrees."""
        self._last_graph, self._last_active = graph, active
        self._in_degree, self._out_degree = degrees(graph)

    def _observation(self) -> dict[str, Any]:
        episode = self.episode
        graph = self._last_graph
        prev = episode.last_outputs
        obs = self.obs_builder.build(
            self._template, episode.round, None, episode.agent_tokens, episode.team_tokens, self._in_degree,
            self._out_degree,
            [m.answer if m else None for m in prev], [m.confidence if m else None for m in prev],
            [int(m.verdict) if m else 0 for m in prev],
        )
        task, agents = self.obs_builder.controller_view(obs, episode.ran, self._last_active)
        return {"task": task, "agents": agents, "adjacency": graph.copy(), "round": int(episode.round)}

    def _info(self, calls, round_tokens, halted: bool) -> dict[str, Any]:
        n = self.n_agents
        edges = sum(self._out_degree)
        return {
            "calls": np.asarray(calls, dtype=np.int64),
            "round_tokens": np.asarray(round_tokens, dtype=np.int64),
            "team_tokens": int(self.episode.team_tokens),
            "edges": edges,
            "density": edges / (n * (n - 1)),
            "accuracy": float(self.episode.accuracy),
            "in_degree": np.asarray(self._in_degree, dtype=np.int64),
            "out_degree": np.asarray(self._out_degree, dtype=np.int64),
            "tokens_estimated": int(self.episode.tokens_estimated),
            "halted": int(halted),
            "task_text": self.episode.task.prompt,
            "outputs": [None if m is None else {"text": m.text, "answer": m.answer, "confidence": m.confidence,
                                                "verdict": int(m.verdict)}
                        for m in self.episode.last_outputs],
        }
