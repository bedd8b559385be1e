"""The episode engine: one task, a team, and one :class:`RoundSpec` per round.

Every front-end (the PettingZoo env of six CommActions, the orchestrator env of central
controllers) and every study drives a team through this module, and nothing here knows how a
controller chose its graph. An episode:

1. :meth:`TeamEpisode.start`: a task, the episode's randomness and adversaries.
2. :meth:`TeamEpisode.run_round` once per round (at most ``max_rounds``): the round's
   :class:`RoundSpec` says who is called, who hears whom and whose output is verified; the
   executor runs it in SCC layers (:mod:`topo_env.engine.executor`).
3. :meth:`TeamEpisode.decide`: the decision node (FinalRefer) answers from the last output of
   every agent that ran at least once, the answer is scored and the episode is over. A controller
   may decide after any round (halting early) and must decide after the last.

Reward (Agent Q-Mix Eq. 12): ``R = w_acc * accuracy - w_tok * min(tokens / max_tokens, 1)`` with
``tokens`` the team's tokens including the decision node's. :meth:`TeamEpisode.step_reward`
pays it at the end (``sparse``) or charges the token penalty round by round (``shaped``): the
per-round rewards of both modes sum to R.
"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from topo_env.engine.team_backend import Decision, Message, TeamBackend, Verdict
from topo_env.engine.executor import RoundExecutor, RoundResult
from topo_env.engine.tasks import Task
from topo_env.engine.traces import append_trace, episode_record, truth_record

REWARD_MODES: tuple[str, ...] = ("sparse", "shaped")


def run_to_end(coro):
    """The value of a coroutine that awaits no I/O (a CPU backend's, or one that calls sync
    steps), stepped directly: no event loop needed, so it also runs where one is already running
    (a notebook)."""
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value
    coro.close()
    raise RuntimeError("a coroutine run without an event loop awaited I/O: a backend with concurrent=False must "
                       "not (declare it concurrent=True)")


def as_flags(what: str, value: Any, shape: tuple[int, ...]) -> np.ndarray:
    """``value`` as a new bool array of ``shape``: bool, or integers 0/1; otherwise a ValueError
    that names ``what`` (e.g. ``"RoundSpec active"``) and the bad shape, dtype or entry."""
    arr = np.asarray(value)
    if arr.shape != shape:
        raise ValueError(f"{what} has shape {arr.shape}, expected {shape}")
    if arr.dtype == bool:
        return arr.copy()
    if not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"{what} has dtype {arr.dtype}: use bool (or integers 0/1)")
    off = arr & ~1  # nonzero exactly where an entry is neither 0 nor 1
    if off.any():
        raise ValueError(f"{what} holds {int(arr[off != 0][0])}: entries must be 0 or 1")
    return arr.astype(bool)


def _flags(name: str, value: Any, shape: tuple[int, ...]) -> np.ndarray:
    """A RoundSpec field: :func:`as_flags`, read-only."""
    arr = as_flags(f"RoundSpec {name}", value, shape)
    arr.flags.writeable = False
    return arr


@dataclass(frozen=True, eq=False)
class RoundSpec:
    """What one round runs, for a team of N agents.

    Attributes:
        adjacency: (N, N) bool; ``adjacency[u, v]``: u's output of this round reaches v before v
            answers (u -> v). No self-loops; both ends active.
        active: (N,) bool; who is called this round. An inactive agent is not called and keeps its
            last output (what the decision node and later rounds see of it).
        verify: (N,) bool; whose output of this round goes through the domain's verifier (the
            verdict travels with the message). Only active agents.
        recall: (N, N) bool or None; ``recall[u, v]``: v is also shown u's latest output from an
            earlier round (u need not be active; v must be). This is how a sequential controller
            (the next-agent front-end) lets the agent it calls see every output so far. None: no
            recalls.

    Integer 0/1 arrays are accepted and stored as read-only bool arrays. Construction validates
    and raises a ValueError naming the offending entry.
    """

    adjacency: np.ndarray
    active: np.ndarray
    verify: np.ndarray
    recall: np.ndarray | None = None
    everyone: bool = field(init=False, repr=False)  # every agent active
    verified: frozenset[int] = field(init=False, repr=False)  # the agents in ``verify``
    key: bytes = field(init=False, repr=False)  # identifies the graph and the active set

    def __post_init__(self) -> None:
        adj = np.asarray(self.adjacency)
        if adj.ndim != 2 or adj.shape[0] != adj.shape[1] or adj.shape[0] < 1:
            raise ValueError(f"RoundSpec adjacency must be a square (N, N) array, got shape {adj.shape}")
        n = adj.shape[0]
        adj = _flags("adjacency", adj, (n, n))
        active = _flags("active", self.active, (n,))
        verify = _flags("verify", self.verify, (n,))
        if adj.diagonal().any():
            i = int(np.flatnonzero(adj.diagonal())[0])
            raise ValueError(f"RoundSpec adjacency has a self-loop at agent {i}: A[i, i] must be 0")
        if not active.all():
            senders, receivers = np.nonzero(adj & ~(active[:, None] & active[None, :]))
            if senders.size:
                u, v = int(senders[0]), int(receivers[0])
                who = u if not active[u] else v
                raise ValueError(f"RoundSpec edge {u}->{v} touches inactive agent {who}: activate it or drop the edge")
            idle = np.flatnonzero(verify & ~active)
            if idle.size:
                raise ValueError(f"RoundSpec verifies inactive agent {int(idle[0])}: only active agents' outputs are checked")
        recall = None
        if self.recall is not None:
            recall = _flags("recall", self.recall, (n, n))
            if np.diagonal(recall).any():
                i = int(np.flatnonzero(np.diagonal(recall))[0])
                raise ValueError(f"RoundSpec recall has a self-loop at agent {i}: an agent always sees its own last output")
            idle = np.flatnonzero(recall.any(axis=0) & ~active)
            if idle.size:
                raise ValueError(f"RoundSpec recalls to inactive agent {int(idle[0])}: only active agents are shown outputs")
            if not recall.any():
                recall = None
        object.__setattr__(self, "adjacency", adj)
        object.__setattr__(self, "active", active)
        object.__setattr__(self, "verify", verify)
        object.__setattr__(self, "recall", recall)
        everyone = bool(active.all())
        object.__setattr__(self, "everyone", everyone)
        object.__setattr__(self, "verified", frozenset(np.flatnonzero(verify).tolist()))
        object.__setattr__(self, "key", adj.tobytes() if everyone else adj.tobytes() + active.tobytes())

    @property
    def n_agents(self) -> int:
        return self.adjacency.shape[0]

    @classmethod
    def all_active(cls, adjacency: Any, verify: Any = None) -> "RoundSpec":
        """Every agent active (the PettingZoo front-end's rounds); ``verify`` None: nobody."""
        n = np.asarray(adjacency).shape[0]
        return cls(adjacency, np.ones(n, dtype=bool), np.zeros(n, dtype=bool) if verify is None else verify)

    def edges(self) -> list[tuple[int, int]]:
        """The directed edges ``(u, v)`` in row-major order."""
        return [(int(u), int(v)) for u, v in zip(*np.nonzero(self.adjacency))]


@dataclass(frozen=True)
class RewardConfig:
    """Eq. 12's weights: ``R = w_acc * accuracy - w_tok * min(tokens / max_tokens, 1)``."""

    w_acc: float = 1.25
    w_tok: float = 0.10
    max_tokens: int = 10000
    mode: str = "sparse"

    def __post_init__(self) -> None:
        if self.mode not in REWARD_MODES:
            raise ValueError(f"reward mode {self.mode!r}: must be one of {list(REWARD_MODES)}")

    def penalty(self, tokens: int) -> float:
        return self.w_tok * min(tokens / self.max_tokens, 1.0)

    def step_rewards(self, accuracy: np.ndarray, tokens: np.ndarray, ended: np.ndarray,
                     paid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`TeamEpisode.step_reward` of B episodes at once: (B,) accuracies, team tokens so far,
        whether each episode has ended and the token penalty already charged (``shaped``; zeros at
        the start) give the step's (B,) rewards and the penalty charged up to now (the next ``paid``)."""
        penalty = self.w_tok * np.minimum(tokens / self.max_tokens, 1.0)
        if self.mode == "shaped":
            return np.where(ended, self.w_acc * accuracy, 0.0) - (penalty - paid), penalty
        return np.where(ended, self.w_acc * accuracy - penalty, 0.0), penalty


class TeamEpisode:
    """One team playing one task at a time, round by round.

    Args:
        backend: what answers the agents' calls (simulated or LLM team).
        roles: role kind of each agent (N entries).
        max_rounds: the most rounds an episode may run (the backend's noise and the observations
            are sized by it).
        reward: Eq. 12's weights and the payment mode.

    State after :meth:`start` (read-only for callers): ``task``, ``round`` (rounds run so far),
    ``last_outputs`` (per agent, its latest output or None), ``ran`` (per agent, ran at least once),
    ``agent_tokens`` / ``team_tokens`` (tokens so far; the team's include the decision node's once
    it answered), ``history`` (one :class:`~topo_env.engine.executor.RoundResult` per round), ``decision``
    and ``accuracy`` (after :meth:`decide`), ``adversaries``.
    """

    def __init__(self, backend: TeamBackend, roles: tuple[str, ...], max_rounds: int,
                 reward: RewardConfig | None = None):
        self.backend = backend
        self.roles = tuple(roles)
        self.n_agents = len(self.roles)
        self.max_rounds = int(max_rounds)
        self.reward = reward or RewardConfig()
        self.executor = RoundExecutor(backend, self.roles)
        self._loop: asyncio.AbstractEventLoop | None = None
        self.trace_path: Path | None = None
        self.truth_path: Path | None = None
        self._clear(None, ())
        self.ended = True  # nothing to play before start()

    # -- episode ---------------------------------------------------------------------------
    def start(self, task: Task, rng: np.random.Generator,
              adversaries: Sequence[int] | Callable[[np.random.Generator], Sequence[int]] = ()) -> None:
        """Begin an episode on ``task``; the backend draws the episode's randomness from ``rng``.

        ``adversaries``: the agents playing injected adversaries, or a function of ``rng`` that
        draws them, called after the backend's draws (so a seed gives the same task and noise
        with or without adversaries). A start that raises (the backend refusing the task)
        changes nothing."""
        self.backend.start_episode(task, rng, self.n_agents, self.max_rounds)  # validates, then commits
        if callable(adversaries):
            adversaries = adversaries(rng)
        self._clear(task, tuple(sorted(adversaries)))

    def _clear(self, task: Task | None, adversaries: tuple[int, ...]) -> None:
        """The state of an episode on ``task`` before its first round."""
        n = self.n_agents
        self.task = task
        self.adversaries = adversaries
        self.executor.adversarial = frozenset(adversaries)
        self.round = 0
        self.ended = False
        self.history: list[RoundResult] = []
        self.last_outputs: list[Message | None] = [None] * n
        self.ran = [False] * n
        self.agent_tokens = [0] * n
        self.team_tokens = 0
        self.tokens_estimated = False
        self.decision: Decision | None = None
        self.decision_shown: tuple[Message, ...] = ()
        self.accuracy = 0.0
        self._penalty_paid = 0.0

    def run_round(self, spec: RoundSpec) -> RoundResult:
        """Run one round. Raises ValueError for a spec of the wrong size and RuntimeError when the
        episode is over or all ``max_rounds`` rounds have run; either leaves the episode unchanged."""
        return self.run_coroutine(self.arun_round(spec))

    async def arun_round(self, spec: RoundSpec) -> RoundResult:
        """:meth:`run_round` as a coroutine, awaited on the caller's event loop: how several
        episodes (one :class:`TeamEpisode` each) share one loop and one LLM client."""
        if self.ended:
            raise RuntimeError("the episode is over (or not started): call start() first")
        if self.round >= self.max_rounds:
            raise RuntimeError(f"all {self.max_rounds} rounds have run: call decide()")
        if spec.adjacency.shape[0] != self.n_agents:
            raise ValueError(f"RoundSpec is for {spec.n_agents} agents, the team has {self.n_agents}")
        result = await self.executor.run_round(self.task, self.round, spec, self.last_outputs)
        self.history.append(result)
        self.agent_tokens = [a + b for a, b in zip(self.agent_tokens, result.agent_tokens)]
        self.team_tokens += sum(result.agent_tokens)
        self.tokens_estimated = self.tokens_estimated or result.tokens_estimated
        self.last_outputs = list(result.finals)
        if spec.everyone:
            self.ran = [True] * self.n_agents
        else:
            self.ran = [r or bool(a) for r, a in zip(self.ran, spec.active)]
        self.round += 1
        return result

    def decide(self) -> Decision:
        """The decision node answers from the last output of every agent that ran; the episode ends."""
        return self.run_coroutine(self.adecide())

    async def adecide(self) -> Decision:
        """:meth:`decide` as a coroutine (see :meth:`arun_round`)."""
        if self.ended:
            raise RuntimeError("the episode is over (or not started): call start() first")
        shown = tuple(m for m, ran in zip(self.last_outputs, self.ran) if ran and m is not None)
        decision = await self.backend.decide(self.task, shown)
        self.decision, self.decision_shown = decision, shown
        self.team_tokens += decision.reply.total_tokens
        self.tokens_estimated = self.tokens_estimated or decision.reply.tokens_estimated
        self.accuracy = decision.accuracy
        self.ended = True
        if self.trace_path is not None:
            append_trace(self.trace_path, episode_record(self))
        if self.truth_path is not None:
            append_trace(self.truth_path, truth_record(self.task))
        return decision

    def record(self, path: str | Path | None, truth: str | Path | None = None) -> None:
        """Append every episode that ends from now on to the JSONL trace file ``path``
        (:mod:`topo_env.engine.traces`), and with ``truth`` its task's hidden truth to that file
        (:func:`~topo_env.engine.traces.truth_record`: a simulated task's difficulty, latent, trap; kept
        apart, since a real team's traces never hold it); None stops recording."""
        self.trace_path = None if path is None else Path(path)
        self.truth_path = None if path is None or truth is None else Path(truth)

    def step_reward(self) -> float:
        """The reward of the step just taken (a round, and the decision when it ended the episode)."""
        cfg = self.reward
        penalty = cfg.penalty(self.team_tokens)
        if cfg.mode == "shaped":
            paid, self._penalty_paid = self._penalty_paid, penalty
            return (cfg.w_acc * self.accuracy if self.ended else 0.0) - (penalty - paid)
        return cfg.w_acc * self.accuracy - penalty if self.ended else 0.0

    @property
    def episode_reward(self) -> float:
        """Eq. 12 for the episode so far (the return once it ended)."""
        return self.reward.w_acc * self.accuracy - self.reward.penalty(self.team_tokens)

    # -- running backend coroutines -------------------------------------------------------
    def run_coroutine(self, coro):
        """Run a coroutine of the executor/backend: on an event loop for I/O backends, stepped
        directly for CPU backends (no loop needed, identical result)."""
        if self.backend.concurrent:
            return self.event_loop().run_until_complete(coro)
        return run_to_end(coro)

    def event_loop(self) -> asyncio.AbstractEventLoop:
        """This episode's event loop (made on first use, kept until :meth:`close`): an I/O
        backend's client keeps its connections on one loop."""
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
        return self._loop

    def close(self) -> None:
        if self._loop is not None:
            self._loop.close()
            self._loop = None

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_loop"] = None  # event loops do not pickle; a new one is made on demand
        return state


def episode_transcript(episode: TeamEpisode, labels: Sequence[str] = ()) -> str:
    """The episode so far, round by round: the round's label (how the controller described its
    choice, e.g. the agents' actions), edges and plan, every call with what it was shown, verdicts,
    and the decision."""
    task = episode.task
    if task is None:
        return ""
    lines = [f"Task {task.id} ({task.domain}): {task.prompt}"]
    if episode.adversaries:
        lines.append("adversaries: " + ", ".join(f"agent_{i}" for i in episode.adversaries))
    for k, res in enumerate(episode.history):
        label = labels[k] if k < len(labels) else _spec_label(res.spec)
        lines.append(f"== round {res.round + 1}/{episode.max_rounds}: {label}")
        edges = [f"{u}->{v}" for u, v in zip(*np.nonzero(res.adjacency))]
        lines.append(f"   edges: {' '.join(edges) or '(none)'}   plan: {res.plan}")
        for c in res.calls:
            got = ", ".join(f"agent_{s}:{p}" for s, p in c.received) or "-"
            lines.append(
                f"   [layer {c.layer}] agent_{c.agent} {c.phase:<6} saw [{got}] "
                f"tokens={c.reply.total_tokens}: {c.reply.text}"
            )
        for i, m in enumerate(res.finals):
            if m is not None and res.spec.active[i] and m.verdict != Verdict.NONE:
                lines.append(f"   verifier on agent_{m.sender}: {m.verdict_text}")
    if episode.decision is not None:
        reply = episode.decision.reply
        lines.append(f"== decision (FinalRefer): {reply.text}  tokens={reply.total_tokens}")
        scored = f"accuracy={episode.accuracy:.0f}" if episode.decision.scored else "not scored (no reference)"
        lines.append(f"   {scored} team_tokens={episode.team_tokens}")
    return "\n".join(lines)


def _spec_label(spec: RoundSpec) -> str:
    active = np.flatnonzero(spec.active).tolist()
    verify = np.flatnonzero(spec.verify).tolist()
    who = "everyone" if len(active) == spec.n_agents else (", ".join(f"agent_{i}" for i in active) or "nobody")
    text = f"active: {who}"
    if verify:
        text += "; verified: " + ", ".join(f"agent_{i}" for i in verify)
    return text
