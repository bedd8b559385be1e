"""The topology environment: a PettingZoo ParallelEnv over LLM-team communication rounds.

One episode is one task and ``rounds`` communication rounds. Each round every agent picks a
:class:`~topo_env.actions.CommAction`; the joint action becomes a directed graph
(:func:`~topo_env.graph.build_adjacency`, targets from :mod:`topo_env.targets`); the round
runs over that graph (:class:`~topo_env.executor.RoundExecutor`). After the last round the
decision node (FinalRefer) answers and the team is scored.

Rewards (paper Eq. 12): ``R = w_acc * accuracy - w_tok * min(tokens_used / max_tokens, 1)``.
``reward_mode="sparse"`` pays R to every agent at the last round (0 before);
``reward_mode="shaped"`` charges the token penalty round by round (the decision node's
tokens in the last round) and pays ``w_acc * accuracy`` at the end: the per-round rewards
sum to the same return.

Episode end: after the last round the task is answered, so ``terminations`` are True for
every agent (a true terminal state: no bootstrapping past it), ``truncations`` stay False,
and ``env.agents == []``.
"""
from __future__ import annotations

import asyncio
import numbers
from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces
from pettingzoo import ParallelEnv

from topo_env.actions import ACTION_NAMES, N_ACTIONS
from topo_env.backend import Message, TeamBackend, Verdict
from topo_env.config import ConfigError, EnvConfig, check_adversaries
from topo_env.encoders import make_encoder
from topo_env.executor import RoundExecutor, RoundResult
from topo_env.graph import PlanCache, adjacency_of
from topo_env.observation import ObservationBuilder, answer_codes
from topo_env.sim.profiles import get_profile
from topo_env.sim.team import SimTeamBackend
from topo_env.targets import choose_targets_one
from topo_env.tasks import Task

INFO_KEYS: tuple[str, ...] = (
    "calls", "round_tokens", "team_tokens", "edges", "density", "accuracy",
    "target", "in_degree", "out_degree", "tokens_estimated", "action_mask",
)


def make_backend(config: EnvConfig) -> TeamBackend:
    """The team backend a config asks for."""
    if config.backend == "sim":
        return SimTeamBackend(get_profile(config.profile))
    if config.backend == "llm":
        from agents_llm.client import LLMConfig  # real LLM teams: imported only when used
        from agents_llm.tasks import load_humaneval, load_jsonl
        from agents_llm.team import LLMTeamBackend, TaskPool

        try:
            llm = LLMConfig(**config.llm)
        except TypeError as err:
            raise ConfigError(f"llm section: {err}") from None
        tasks = load_humaneval() if config.dataset == "humaneval" else load_jsonl(config.dataset, config.domain)
        tasks = [t for t in tasks if t.domain == config.domain]
        if not tasks:
            raise ConfigError(f"dataset={config.dataset!r} holds no {config.domain} tasks")
        pool = TaskPool(tasks, train_size=min(config.train_size, len(tasks) - 1))
        return LLMTeamBackend(config.domain, llm, pool, config.roles, config.personas)
    raise ConfigError(f"backend={config.backend!r}: no such backend")


def parallel_env(**config: Any) -> "TopologyParallelEnv":
    """A :class:`TopologyParallelEnv` from keyword arguments equal to the YAML env keys."""
    return TopologyParallelEnv(EnvConfig.from_dict(config))


class TopologyParallelEnv(ParallelEnv):
    """N LLM agents choose, each round, how they communicate.

    Spaces (identical for all agents, cached): action ``Discrete(6)``; observation
    ``Dict(observation=Box(float32, (D,)), action_mask=Box(0, 1, (6,), int8))`` with D
    given by :class:`~topo_env.observation.ObservationBuilder`. ``state()`` is a flat
    float32 vector (``state_space``).

    ``reset(seed=..., options={"task": Task | int, "split": "train" | "eval",
    "adversaries": [i, ...]})``: an int task picks that index of the split; ``adversaries``
    forces the episode's adversary set (``[]``: none). With the simulator, seed and options
    determine the episode completely.

    ``adversaries``: the sorted agent indices playing adversaries this episode (config
    ``adversary_position``: fixed, or drawn per episode from its seeded RNG after the task
    and noise, so the same seed gives the same task with or without adversaries). It is
    never in observations or infos: a policy must tell an adversary from its behaviour.
    """

    metadata = {"name": "topomarl_v0", "render_modes": ["ansi"], "is_parallelizable": True}

    def __init__(self, config: EnvConfig | None = None, backend: TeamBackend | None = None):
        self.config = config or EnvConfig()
        cfg = self.config
        self.render_mode = cfg.render_mode
        self.n_agents, self.rounds = cfg.n_agents, cfg.rounds
        self.possible_agents = [f"agent_{i}" for i in range(cfg.n_agents)]
        self.agents: list[str] = []
        self._index = {name: i for i, name in enumerate(self.possible_agents)}
        self.backend = backend if backend is not None else make_backend(cfg)
        self.encoder = make_encoder(cfg.encoder, None if cfg.encoder == "minilm" else cfg.embed_dim)
        self.obs_builder = ObservationBuilder(cfg.n_agents, cfg.rounds, cfg.roles, self.encoder.dim, cfg.max_tokens,
                                              cfg.personas)
        self.executor = RoundExecutor(self.backend, cfg.roles, cfg.adversarial_agents)
        self.adversaries: tuple[int, ...] = tuple(sorted(cfg.adversarial_agents))
        self._plans = PlanCache()
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
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ended = True
        self.history: list[RoundResult] = []

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
        saved = rng.bit_generator.state
        options = dict(options or {})
        try:
            forced = options.get("adversaries")
            if forced is not None:
                forced = tuple(sorted(check_adversaries(forced, self.n_agents, "options['adversaries']")))
            task = self._choose_task(rng, options)
            template = self.obs_builder.episode_template(
                self.encoder.encode(task.prompt), int(task.metadata.get("prompt_tokens", len(task.prompt.split())))
            )
            self.backend.start_episode(task, rng, self.n_agents, self.rounds)  # validates, then commits
            drawn = self.config.draw_adversaries(rng)  # after task and noise: they do not depend on it
        except BaseException:
            rng.bit_generator.state = saved
            raise
        self._rng, self.task, self._template = rng, task, template
        self.adversaries = drawn if forced is None else forced
        self.executor.adversarial = frozenset(self.adversaries)
        n = self.n_agents
        self.round = 0
        self.agents = list(self.possible_agents)
        self._ended = False
        self.history = []
        self._set_adjacency(np.zeros((n, n), dtype=np.int8))
        self._previous: list[Message | None] = [None] * n
        self._prev_actions: tuple[int, ...] | None = None
        self._agent_tokens = [0] * n
        self._team_tokens = 0
        self._penalty_paid = 0.0
        self.accuracy = 0.0
        self.decision = None
        self._obs = self._observe()
        infos = self._infos(calls=[0] * n, round_tokens=[0] * n, targets=[-1] * n, estimated=False)
        return self._obs_dict(), infos

    def step(self, actions: dict[str, Any]):
        if self._ended:
            raise RuntimeError("step() called after the episode ended; call reset() first")
        acts = self._validate(actions)
        n = self.n_agents
        if self._prev_actions is None:
            targets = choose_targets_one(self.config.target_rule, None, None, n)
        else:
            codes = answer_codes([m.answer for m in self._previous])
            confs = [0.5 if m.confidence is None else m.confidence for m in self._previous]
            targets = choose_targets_one(self.config.target_rule, codes, confs, n)
        adjacency = adjacency_of(acts, targets)
        plan = self._plans(adjacency)
        result = self._run(self.executor.run_round(self.task, self.round, acts, targets, adjacency, plan, self._previous))
        self.history.append(result)
        round_tokens = result.tokens_per_agent(n)
        estimated = any(c.reply.tokens_estimated for c in result.calls)
        self._agent_tokens = [a + b for a, b in zip(self._agent_tokens, round_tokens)]
        self._team_tokens += sum(round_tokens)
        self._previous = list(result.finals)
        self._prev_actions = tuple(acts)
        self._set_adjacency(adjacency)
        self.round += 1
        last = self.round == self.rounds
        if last:
            self.decision = self._run(self.backend.decide(self.task, result.finals))
            self._team_tokens += self.decision.reply.total_tokens
            estimated = estimated or self.decision.reply.tokens_estimated
            self.accuracy = self.decision.accuracy
        reward = self._reward(last)
        self._obs = self._observe()
        obs = self._obs_dict()
        infos = self._infos(calls=result.calls_per_agent(n), round_tokens=round_tokens, targets=list(targets),
                            estimated=estimated)
        rewards = {a: reward for a in self.agents}
        terminations = {a: last for a in self.agents}
        truncations = {a: False for a in self.agents}
        if last:
            self._ended = True
            self.agents = []
        return obs, rewards, terminations, truncations, infos

    def _reward(self, last: bool) -> float:
        cfg = self.config
        penalty = cfg.w_tok * min(self._team_tokens / cfg.max_tokens, 1.0)
        if cfg.reward_mode == "shaped":
            step_penalty = penalty - self._penalty_paid
            self._penalty_paid = penalty
            return (cfg.w_acc * self.accuracy if last else 0.0) - step_penalty
        return cfg.w_acc * self.accuracy - penalty if last else 0.0

    # -- views ---------------------------------------------------------------------------
    def state(self) -> np.ndarray:
        if self._rng is None:
            raise RuntimeError("state() called before reset()")
        return self.obs_builder.state(self._obs, self.adjacency, self.round)

    def render(self) -> str | None:
        if self.render_mode is None:
            gymnasium.logger.warn("render() called with render_mode=None; create the env with render_mode='ansi'")
            return None
        return self.transcript()

    def transcript(self) -> str:
        """The episode so far, round by round: plan, messages, answers, tokens."""
        if self._rng is None:
            return ""
        lines = [f"Task {self.task.id} ({self.task.domain}): {self.task.prompt}"]
        if self.adversaries:
            lines.append("adversaries: " + ", ".join(f"agent_{i}" for i in self.adversaries))
        for res in self.history:
            acts = ", ".join(f"agent_{i}={ACTION_NAMES[a]}" for i, a in enumerate(res.actions))
            lines.append(f"== round {res.round + 1}/{self.rounds}: {acts}")
            edges = [f"{u}->{v}" for u, v in zip(*np.nonzero(res.adjacency))]
            lines.append(f"   edges: {' '.join(edges) or '(none)'}   plan: {res.plan}")
            for c in res.calls:
                got = ", ".join(f"agent_{s}:{p}" for s, p in c.received) or "-"
                lines.append(
                    f"   [layer {c.layer}] agent_{c.agent} {c.phase:<6} saw [{got}] "
                    f"tokens={c.reply.total_tokens}: {c.reply.text}"
                )
            for m in res.finals:
                if m.verdict != Verdict.NONE:
                    lines.append(f"   verifier on agent_{m.sender}: {m.verdict_text}")
        if self.decision is not None:
            lines.append(f"== decision (FinalRefer): {self.decision.reply.text}  tokens={self.decision.reply.total_tokens}")
            lines.append(f"   accuracy={self.accuracy:.0f} team_tokens={self._team_tokens}")
        return "\n".join(lines)

    def close(self) -> None:
        if self._loop is not None:
            self._loop.close()
            self._loop = None

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_loop"] = None  # event loops do not pickle; a new one is made on demand
        return state

    # -- internals -----------------------------------------------------------------------
    def _choose_task(self, rng: np.random.Generator, options: dict) -> Task:
        unknown = sorted(set(options) - {"task", "split", "adversaries"})
        if unknown:  # PettingZoo's API test passes arbitrary options: warn, do not fail
            gymnasium.logger.warn(f"reset() ignores unknown option(s) {unknown}; known: ['adversaries', 'split', 'task']")
        split = options.get("split", self.config.split)
        task = options.get("task")
        if task is None:
            return self.backend.sample_task(rng, split)
        if isinstance(task, numbers.Integral) and not isinstance(task, bool):
            return self.backend.tasks.task(split, int(task))
        if isinstance(task, Task):
            return task
        raise ValueError(f"options['task'] must be a Task or a task index, got {task!r}")

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

    def _run(self, coro):
        """Run a coroutine of the executor/backend: on an event loop for I/O backends,
        stepped directly for CPU backends (no loop needed, identical result)."""
        if self.backend.concurrent:
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
            return self._loop.run_until_complete(coro)
        try:
            coro.send(None)
        except StopIteration as done:
            return done.value
        coro.close()
        raise RuntimeError("a backend with concurrent=False awaited I/O; declare it concurrent=True")

    def _set_adjacency(self, adjacency: np.ndarray) -> None:
        """The graph of the last round (zeros before round 1) and its degrees."""
        self.adjacency = adjacency
        rows = adjacency.tolist()  # plain Python: numpy reductions cost more on a 3x3 graph
        self._out_degree = [sum(r) for r in rows]
        self._in_degree = [sum(c) for c in zip(*rows)]
        self._edges = sum(self._out_degree)

    def _observe(self) -> np.ndarray:
        prev = self._previous
        return self.obs_builder.build(
            self._template, self.round, self._prev_actions, self._agent_tokens,
            self._team_tokens, self._in_degree, self._out_degree,
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
                "team_tokens": int(self._team_tokens),
                "edges": edges,
                "density": dens,
                "accuracy": float(self.accuracy),
                "target": int(targets[i]),
                "in_degree": int(ins[i]),
                "out_degree": int(outs[i]),
                "tokens_estimated": int(estimated),
                "action_mask": self._mask.copy(),
            }
            for i, name in enumerate(self.possible_agents)
        }
