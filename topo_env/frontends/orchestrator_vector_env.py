"""# topomarl_orchestrator_vector_v0: the orchestrator env for B episodes at once (simulated team)

    from topo_env.frontends.orchestrator_vector_env import orchestrator_vector_env
    envs = orchestrator_vector_env(1024, mode="graph", profile="mmlu_pro")  # a gymnasium.vector.VectorEnv
    obs, infos = envs.reset(seed=0)
    obs, rewards, terminations, truncations, infos = envs.step(envs.action_space.sample())

A ``gymnasium.vector.VectorEnv`` of B = ``num_envs`` rows of
:func:`~topo_env.frontends.orchestrator_env.orchestrator_env` (either mode) whose rounds run in
:class:`~topo_env.sim.batch.BatchSimulator`: for the same seeds and actions every row gives the observations,
rewards, terminations and numeric infos the one-episode env gives, and the whole env what
``gymnasium.vector.SyncVectorEnv([lambda: orchestrator_env(...)] * B)`` gives
(``tests/test_orchestrator_vector_env.py`` checks both), at batch speed (``benchmarks/bench_orchestrator_vector.py``).
Simulated teams only; for an LLM team use that SyncVectorEnv.

Spaces. ``single_observation_space`` / ``single_action_space`` are the one-episode env's; ``observation_space`` /
``action_space`` are those batched (``gymnasium.vector.utils.batch_space``): observations ``task`` (B, E + 1) float32,
``agents`` (B, N, F) float32, ``adjacency`` (B, N, N) int8, ``round`` (B,) int64; ``"graph"`` actions
``adjacency`` (B, N, N), ``active`` (B, N), ``verify`` (B, N), ``halt`` (B,), ``recall`` (B, N, N) (optional, as in
the one-episode env); ``"next_agent"`` actions (B,) ints in 0..N. Rewards (B,) float64; ``truncations`` all False.

Seeding. Row b plays the episodes an ``orchestrator_env`` plays after ``reset(seed=s_b)`` followed by plain
``reset()`` calls: its first episode from the generator ``seed=s_b`` makes, each next one from the same generator,
continued (what SyncVectorEnv's sub-env b does). ``reset(seed=s)`` with an int sets s_b = s + b, with a list
s_b = ``seed[b]``; None (or a None entry) keeps a row's generator (a fresh random one for a row never seeded).
``reset(options)`` takes the one-episode env's options (``task``, ``split``, ``adversaries``) for the episodes
it starts; episodes started by an autoreset use the config's, as SyncVectorEnv's sub-envs do; ``reset_mask``
(a (B,) bool array) restarts only those rows.

Autoreset (``metadata["autoreset_mode"]``, Gymnasium's rules). ``NEXT_STEP`` (default): the step after a row's
episode ended starts its next episode and ignores that row's action (reward 0, not terminated, the reset's
observation and info). ``SAME_STEP``: the step that ends an episode returns the next episode's first observation
and reset info, with ``infos["final_obs"]`` (an object array of one-episode observations) and
``infos["final_info"]`` for the rows that ended. ``DISABLED``: rows restart only through ``reset_mask``; stepping
an ended row raises.

Infos: Gymnasium's dict of (B, ...) arrays, each with its ``_key`` mask: ``calls``, ``round_tokens``, ``in_degree``,
``out_degree`` (B, N) int64; ``team_tokens``, ``edges``, ``tokens_estimated`` (always 0: simulated tokens are
counted), ``halted`` (B,) int64; ``density``, ``accuracy`` (B,) float64. Not ``task_text`` or ``outputs`` (Python
objects per episode: play ``orchestrator_env`` for those), nor ``episode_summary()``.

Bad input: an action outside the space raises a ValueError naming the bad key or entry and changes nothing; every
row's action is checked, including the rows an autoreset ignores.

Rows at different rounds. ``halt`` (and the next-agent stop) ends episodes after different numbers of rounds, so
rows are at different rounds, while a :class:`~topo_env.sim.batch.BatchState` has one round counter (it selects the
noise of the round). The env keeps every row's state in (B, ...) arrays with a (B,) round counter; a step runs
the rows that play a round in groups of rows at the same round (at most T groups, one
:meth:`~topo_env.sim.batch.BatchSimulator.run_spec` each), then one :meth:`~topo_env.sim.batch.BatchSimulator.decide`
for every row whose episode ends, whatever its round. Episodes start through the one-episode env's own
:func:`~topo_env.frontends.shared.begin_episode`, one row at a time (the task, noise and adversaries drawn by the
same code from the same generator), and observations are built for all rows at once
(:meth:`~topo_env.frontends.observation.ObservationBuilder.controller_view_batch`).
"""
from __future__ import annotations

import numbers
from dataclasses import fields
from typing import Any

import gymnasium
import numpy as np
from gymnasium.utils import seeding
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

from topo_env.engine.backend_registry import BATCH_SIMULATOR, backend_offers
from topo_env.frontends.env_config import EnvConfig
from topo_env.frontends.orchestrator_env import OrchestratorEnv, graph_round, next_agent_round
from topo_env.frontends.shared import RESET_OPTIONS, begin_episode
from topo_env.sim.batch import BatchRoundSpec, BatchSimulator, BatchState, Outputs, TaskArrays
from topo_env.sim.model import EpisodeNoise


def orchestrator_vector_env(num_envs: int, mode: str = "graph",
                            autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP,
                            **config: Any) -> "OrchestratorVectorEnv":
    """An :class:`OrchestratorVectorEnv` of ``num_envs`` rows from keyword arguments equal to the YAML env keys."""
    return OrchestratorVectorEnv(num_envs, EnvConfig.from_dict(config), mode, autoreset_mode)


class OrchestratorVectorEnv(gymnasium.vector.VectorEnv):
    """B rows of the orchestrator env stepped together on the batch simulator (see the module docstring)."""

    def __init__(self, num_envs: int, config: EnvConfig | None = None, mode: str = "graph",
                 autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP):
        cfg = config or EnvConfig()
        if not backend_offers(cfg.backend, BATCH_SIMULATOR):
            raise ValueError(f"OrchestratorVectorEnv plays the simulated team (a backend the batch simulator runs); "
                             f"backend kind {cfg.backend.kind!r} is not one: for an LLM team use "
                             "gymnasium.vector.SyncVectorEnv([lambda: topo_env.orchestrator_env(...)] * num_envs)")
        if isinstance(num_envs, bool) or not isinstance(num_envs, numbers.Integral) or num_envs < 1:
            raise ValueError(f"num_envs={num_envs!r}: must be a positive int")
        self.autoreset_mode = AutoresetMode(autoreset_mode)
        # the one-episode env: its spaces, encoder and observation builder, and its episode starts every row's
        self._env = env = OrchestratorEnv(cfg, mode)
        self.config, self.mode = cfg, mode
        self.num_envs = b = int(num_envs)
        self.n_agents = n = env.n_agents
        self.rounds = env.rounds
        self.metadata = {"name": "topomarl_orchestrator_vector_v0", "autoreset_mode": self.autoreset_mode}
        self.single_observation_space, self.single_action_space = env.observation_space, env.action_space
        self.observation_space = batch_space(env.observation_space, b)
        self.action_space = batch_space(env.action_space, b)
        self.sim = BatchSimulator.from_config(cfg)
        self._rngs: list[np.random.Generator | None] = [None] * b
        # every row's episode, in (B, ...) arrays; the noise is sized at the first start
        self._tasks = TaskArrays(np.zeros(b), np.zeros(b), np.zeros(b, np.int64), np.zeros(b, np.int64))
        self._noise: EpisodeNoise | None = None
        self._templates = np.zeros((b, n, env.obs_builder.dim), dtype=np.float32)
        self._adversaries = np.zeros((b, n), dtype=bool)
        self._outputs = Outputs.empty(b, n)  # every agent's latest output (label -1: none yet)
        self._tokens = np.zeros(b, np.int64)  # the team's tokens, the decision node's once it answered
        self._agent_tokens = np.zeros((b, n), np.int64)
        self._ran = np.zeros((b, n), dtype=bool)
        self._round = np.zeros(b, np.int64)
        self._graph = np.zeros((b, n, n), np.int8)  # last round's edges, recalls included
        self._active = np.zeros((b, n), dtype=bool)  # who was called last round
        self._accuracy = np.zeros(b)
        self._paid = np.zeros(b)  # the token penalty charged so far (shaped rewards)
        self._ended = np.zeros(b, dtype=bool)
        self._fresh = np.ones(b, dtype=bool)  # never reset

    # -- gymnasium.vector.VectorEnv ---------------------------------------------------------
    def reset(self, *, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None):
        """Start the next episode of every row (or of ``options["reset_mask"]``'s rows); see the module docstring.
        A reset that raises changes nothing."""
        b = self.num_envs
        options = dict(options or {})
        mask = options.pop("reset_mask", None)
        rows = np.arange(b) if mask is None else np.flatnonzero(_reset_mask(mask, b))
        if seed is None or isinstance(seed, numbers.Integral):
            seeds = [None if seed is None else int(seed) + i for i in range(b)]
        else:
            seeds = list(seed)
            if len(seeds) != b:
                raise ValueError(f"seed is a list of {len(seeds)} seeds: one per row ({b}) is needed")
        rngs = [self._rngs[r] if seeds[r] is None and self._rngs[r] is not None else seeding.np_random(seeds[r])[0]
                for r in rows]
        self._start(rows, rngs, options)
        for r, rng in zip(rows, rngs):
            self._rngs[r] = rng
        n = self.n_agents
        zeros = np.zeros((len(rows), n), np.int64)
        return self._observe(), self._vector_info(self._info(rows, zeros, zeros, np.zeros(len(rows), bool)), rows)

    def step(self, actions: Any):
        """One round (or a stop) of every row; rows whose episode ended restart per ``autoreset_mode``."""
        if self._fresh.any():
            raise RuntimeError(f"row {int(np.flatnonzero(self._fresh)[0])} has no episode: call reset() first")
        if self.autoreset_mode == AutoresetMode.DISABLED and self._ended.any():
            raise RuntimeError(f"row {int(np.flatnonzero(self._ended)[0])}'s episode has ended: restart it with "
                               "reset(options={'reset_mask': mask}) first (autoreset_mode DISABLED)")
        adjacency, active, verify, recall, halt, speaks = self._round_arrays(actions)
        restart = self._ended.copy() if self.autoreset_mode == AutoresetMode.NEXT_STEP else np.zeros_like(self._ended)
        play = ~restart
        b, n = self.num_envs, self.n_agents
        calls, round_tokens = np.zeros((b, n), np.int64), np.zeros((b, n), np.int64)
        self._run_rounds(np.flatnonzero(play & speaks), adjacency, active, verify, recall, calls, round_tokens)
        ended = play & (halt | (self._round == self.rounds))
        halted = ended & (self._round < self.rounds)
        self._decide(np.flatnonzero(ended))
        rewards, paid = self._env.episode.reward.step_rewards(self._accuracy, self._tokens, ended, self._paid)
        rewards = np.where(play, rewards, 0.0)
        self._paid = np.where(play, paid, self._paid)
        self._ended |= ended
        if restart.any():  # NEXT_STEP: these rows' next episodes, from their generators
            self._start(np.flatnonzero(restart), [self._rngs[r] for r in np.flatnonzero(restart)], None)
        final = {}
        if self.autoreset_mode == AutoresetMode.SAME_STEP and ended.any():
            rows = np.flatnonzero(ended)
            final = self._final(rows, calls[rows], round_tokens[rows], halted[rows])
            self._start(rows, [self._rngs[r] for r in rows], None)
            calls[rows], round_tokens[rows], halted[rows] = 0, 0, False  # the reset's info
        everyone = np.arange(b)
        infos = {**final, **self._vector_info(self._info(everyone, calls, round_tokens, halted), everyone)}
        return self._observe(), rewards, ended, np.zeros(b, dtype=bool), infos

    def close_extras(self, **kwargs: Any) -> None:
        self._env.close()

    # -- episodes ----------------------------------------------------------------------------
    def _start(self, rows: np.ndarray, rngs: list[np.random.Generator], options: dict | None) -> None:
        """Start the next episode of each row of ``rows`` from its generator (``rngs``, in row order), as the
        one-episode env's reset does; a start that raises leaves every generator and row as it was."""
        env = self._env
        first = dict(options or {})
        known = {k: v for k, v in first.items() if k in RESET_OPTIONS}  # unknown options: one warning
        saved = [rng.bit_generator.state for rng in rngs]
        templates, tasks, noises = [], [], []
        adversaries = np.zeros((len(rows), self.n_agents), dtype=bool)
        try:
            for k, rng in enumerate(rngs):
                templates.append(begin_episode(env.episode, self.config, env.encoder, env.obs_builder, rng,
                                               first if k == 0 else known))
                tasks.append(env.episode.task)
                noises.append(env.backend.noise)
                adversaries[k, list(env.episode.adversaries)] = True
        except BaseException:
            for rng, state in zip(rngs, saved):
                rng.bit_generator.state = state
            raise
        noise = EpisodeNoise.concatenate(noises)
        if self._noise is None:
            self._noise = EpisodeNoise(*(np.zeros((self.num_envs,) + getattr(noise, f.name).shape[1:])
                                         for f in fields(noise)))
        _put(self._noise, rows, noise)
        _put(self._tasks, rows, TaskArrays.from_tasks(tasks))
        _put(self._outputs, rows, Outputs.empty(len(rows), self.n_agents))
        self._templates[rows] = np.stack(templates)
        self._adversaries[rows] = adversaries
        for arr in (self._tokens, self._agent_tokens, self._ran, self._round, self._graph, self._active,
                    self._accuracy, self._paid, self._ended, self._fresh):
            arr[rows] = 0

    def _round_arrays(self, actions: Any) -> tuple[np.ndarray, ...]:
        """Every row's action as (adjacency, active, verify, recall or None, halt, speaks): (B, ...) bool arrays,
        ``speaks`` where a round runs (a next-agent stop runs none). Raises a ValueError naming a bad entry."""
        if self.mode == "graph":
            adjacency, active, verify, recall, halt = graph_round(actions, self._ran)
            return adjacency, active, verify, recall, halt, np.ones(self.num_envs, dtype=bool)
        b, n = self.num_envs, self.n_agents
        k = np.asarray(actions)
        if k.shape != (b,) or k.dtype == bool or not np.issubdtype(k.dtype, np.integer):
            raise ValueError(f"actions is a {k.dtype} array of shape {k.shape}: must be {b} agent indices "
                             f"0..{n - 1} or {n} (stop)")
        bad = (k < 0) | (k > n)
        if bad.any():
            raise ValueError(f"action {int(k[bad][0])} (row {int(np.flatnonzero(bad)[0])}) is not an agent index "
                             f"0..{n - 1} or {n} (stop)")
        active, recall = next_agent_round(k, self._ran)
        nobody = np.zeros((b, n), dtype=bool)
        return np.zeros((b, n, n), dtype=bool), active, nobody, recall, k == n, k < n

    def _run_rounds(self, rows: np.ndarray, adjacency: np.ndarray, active: np.ndarray, verify: np.ndarray,
                    recall: np.ndarray | None, calls: np.ndarray, round_tokens: np.ndarray) -> None:
        """One round of every row of ``rows``: the rows at the same round run together (one batch simulator
        call per round counter); ``calls`` and ``round_tokens`` (B, N) get this round's."""
        at = self._round[rows]
        for t in np.unique(at):
            g = rows[at == t]
            state = BatchState(int(t), self._outputs.take(g), self._tokens[g], self._agent_tokens[g], [], [],
                               self._adversaries[g], self._ran[g])
            spec = BatchRoundSpec(adjacency[g], active[g], verify[g], None if recall is None else recall[g])
            after = self.sim.run_spec(state, spec, self._tasks.take(g), self._noise.take(g))
            _put(self._outputs, g, after.previous)
            calls[g], round_tokens[g] = after.calls[-1], after.agent_tokens - state.agent_tokens
            self._tokens[g], self._agent_tokens[g], self._ran[g] = after.tokens, after.agent_tokens, after.ran
            self._round[g] = t + 1
        self._graph[rows] = adjacency[rows] if recall is None else adjacency[rows] | recall[rows]
        self._active[rows] = active[rows]

    def _decide(self, rows: np.ndarray) -> None:
        """The decision node answers in every row of ``rows``, whatever round each is at."""
        if rows.size == 0:
            return
        state = BatchState(0, self._outputs.take(rows), self._tokens[rows], self._agent_tokens[rows], [], [],
                           self._adversaries[rows], self._ran[rows])  # decide() reads no round
        label, tokens = self.sim.decide(state, self._tasks.take(rows), self._noise.take(rows))
        self._tokens[rows] = tokens
        self._accuracy[rows] = label == 0

    # -- views -------------------------------------------------------------------------------
    def _observe(self, rows: np.ndarray | None = None) -> dict[str, np.ndarray]:
        """The batched observations of every row (or of ``rows``), built from the rows' state."""
        sel = slice(None) if rows is None else rows
        builder, out, graph = self._env.obs_builder, self._outputs, self._graph[sel]
        obs = builder.build_batch(self._templates[sel], 0, None, self._agent_tokens[sel], self._tokens[sel],
                                  graph.sum(axis=1), graph.sum(axis=2), out.label[sel], out.conf[sel],
                                  out.verdict[sel])  # round and previous action: not in the controller's view
        task, agents = builder.controller_view_batch(obs, self._ran[sel], self._active[sel])
        return {"task": task, "agents": agents, "adjacency": graph.copy(), "round": self._round[sel].copy()}

    def _info(self, rows: np.ndarray, calls: np.ndarray, round_tokens: np.ndarray,
              halted: np.ndarray) -> dict[str, np.ndarray]:
        """The one-episode env's numeric info of every row of ``rows``, as arrays with a leading row axis."""
        n = self.n_agents
        graph = self._graph[rows]
        in_degree, out_degree = graph.sum(axis=1, dtype=np.int64), graph.sum(axis=2, dtype=np.int64)
        edges = out_degree.sum(axis=1)
        return {"calls": calls, "round_tokens": round_tokens, "team_tokens": self._tokens[rows], "edges": edges,
                "density": edges / (n * (n - 1)), "accuracy": self._accuracy[rows], "in_degree": in_degree,
                "out_degree": out_degree, "tokens_estimated": np.zeros(len(rows), np.int64),
                "halted": halted.astype(np.int64)}

    def _vector_info(self, values: dict[str, np.ndarray], rows: np.ndarray) -> dict[str, np.ndarray]:
        """Gymnasium's vector info: every key's (B, ...) array (zeros outside ``rows``) and its ``_key`` mask."""
        infos = {}
        for key, value in values.items():
            full = np.zeros((self.num_envs,) + value.shape[1:], dtype=value.dtype)
            full[rows] = value
            mask = np.zeros(self.num_envs, dtype=bool)
            mask[rows] = True
            infos[key], infos[f"_{key}"] = full, mask
        return infos

    def _final(self, rows: np.ndarray, calls: np.ndarray, round_tokens: np.ndarray,
               halted: np.ndarray) -> dict[str, Any]:
        """SAME_STEP's ``final_obs`` / ``final_info`` (with their masks) of the rows that just ended."""
        obs = self._observe(rows)
        final_obs = np.full(self.num_envs, None, dtype=object)
        for k, r in enumerate(rows):
            final_obs[r] = {"task": obs["task"][k], "agents": obs["agents"][k], "adjacency": obs["adjacency"][k],
                            "round": int(obs["round"][k])}
        mask = np.zeros(self.num_envs, dtype=bool)
        mask[rows] = True
        return {"final_obs": final_obs, "_final_obs": mask, "final_info": self._vector_info(
            self._info(rows, calls, round_tokens, halted), rows), "_final_info": mask.copy()}


def _reset_mask(mask: Any, num_envs: int) -> np.ndarray:
    """``options["reset_mask"]`` checked as Gymnasium's vector envs check it."""
    if not isinstance(mask, np.ndarray) or mask.shape != (num_envs,) or mask.dtype != np.bool_:
        raise ValueError(f"options['reset_mask'] must be a bool numpy array of shape ({num_envs},), got "
                         f"{getattr(mask, 'dtype', type(mask).__name__)} {getattr(mask, 'shape', '')}")
    if not mask.any():
        raise ValueError("options['reset_mask'] restarts no row: set at least one entry")
    return mask


def _put(target: Any, rows: np.ndarray, values: Any) -> None:
    """Write ``values`` (a dataclass of arrays with one entry per row of ``rows``) into ``target``'s arrays."""
    for f in fields(target):
        getattr(target, f.name)[rows] = getattr(values, f.name)
