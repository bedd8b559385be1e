"""Vectorised simulator: thousands of episodes per call, the same model as the env.

:class:`BatchSimulator` runs the round executor over a batch of episodes and calls the model of
:mod:`topo_env.sim.model` (the very functions the env's team calls) on arrays. Given the same tasks, noise
(:func:`topo_env.sim.model.draw_noise`) and actions, it gives the same answers, tokens and
rewards as the PettingZoo env with ``backend="sim"`` (``tests/test_batch_sim.py`` checks
episode by episode). A round is a :class:`BatchRoundSpec`: B graphs with who is active, who is verified
and who recalls whose earlier output, the batched form of :class:`topo_env.engine.episode.RoundSpec`, so any
controller's graphs are scored at batch speed (:meth:`BatchSimulator.run_spec`, :meth:`BatchSimulator.run_specs`).
The six CommActions are the PettingZoo front-end's adapter on top
(:class:`topo_env.frontends.comm_batch.CommBatchSimulator`: open-loop action arrays, targets resolved per
episode from the previous round). An episode that halts early is one whose remaining rounds are idle
(:meth:`BatchRoundSpec.idle`): nobody is called, nothing changes, and the decision node reads the same outputs.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from topo_env.engine.decision import LLM_DECISION, DecisionMode, parse_decision, settings_decision
from topo_env.engine.plan import PlanCache
from topo_env.engine.roles import TeamPlacement
from topo_env.sim.model import (
    VERDICT_NONE, AgentFeatures, EpisodeNoise, Input, SimOutput, TaskFeatures, draw_noise, simulate_call,
    simulate_decision, simulate_verdict, simulate_vote, wrong_label_cdf,
)
from topo_env.sim.numerics import ARRAYS
from topo_env.sim.profiles import SimProfile, get_profile
from topo_env.engine.tasks import Task


@dataclass(frozen=True)
class TaskArrays:
    """The task features the model uses, for B episodes."""

    difficulty: np.ndarray  # (B,) float64 in [0, 1]
    latent: np.ndarray  # (B,) float64, hidden per-task ability shift ~ N(0, 1)
    prompt_tokens: np.ndarray  # (B,) int64
    subject: np.ndarray  # (B,) int64, index into the profile's subjects

    @property
    def bucket(self) -> np.ndarray:
        return np.minimum((self.difficulty * 3.0).astype(np.int64), 2)

    @classmethod
    def from_tasks(cls, tasks: list[Task]) -> "TaskArrays":
        return cls(np.array([t.hidden["difficulty"] for t in tasks], dtype=np.float64),
                   np.array([t.hidden["latent"] for t in tasks], dtype=np.float64),
                   np.array([t.metadata["prompt_tokens"] for t in tasks], dtype=np.int64),
                   np.array([t.hidden["subject_index"] for t in tasks], dtype=np.int64))

    @classmethod
    def sample(cls, rng: np.random.Generator, profile: SimProfile, batch: int) -> "TaskArrays":
        """B task feature sets drawn from the same distributions as
        :meth:`topo_env.sim.tasks.SimTaskSource.task` (vectorised; no texts)."""
        d = rng.beta(profile.diff_a, profile.diff_b, batch)
        latent = rng.standard_normal(batch)
        z = rng.standard_normal(batch)
        subject = rng.choice(len(profile.subjects), size=batch, p=np.array(profile.subject_probs))
        tokens = np.floor(profile.task_tokens_mean * (0.7 + 0.6 * d) * np.exp(0.2 * z) + 0.5).astype(np.int64)
        return cls(d, latent, tokens, subject.astype(np.int64))

    def take(self, idx: np.ndarray) -> "TaskArrays":
        return TaskArrays(*(getattr(self, f.name)[idx] for f in fields(self)))


@dataclass(frozen=True)
class BatchRoundSpec:
    """One round for B episodes: the batched :class:`topo_env.engine.episode.RoundSpec`.

    ``adjacency`` (B, N, N) 0/1 (``A[b, u, v]``: in episode b, u's output reaches v), ``active``
    (B, N) bool (who is called; the others keep their last output), ``verify`` (B, N) bool (whose
    output goes through the verifier), ``recall`` (B, N, N) bool or None (``recall[b, u, v]``: v is
    also shown u's latest output from an earlier round, after this round's messages; recalls from an
    agent that has not run yet are dropped). Validated on construction with the same rules as
    RoundSpec (no self-loops; edges and verification only between active agents; recalls only to
    active agents); a recall with no entry set is stored as None."""

    adjacency: np.ndarray
    active: np.ndarray
    verify: np.ndarray
    recall: np.ndarray | None = None

    def __post_init__(self) -> None:
        adj = np.asarray(self.adjacency)
        if adj.ndim != 3 or adj.shape[1] != adj.shape[2]:
            raise ValueError(f"BatchRoundSpec adjacency must have shape (B, N, N), got {adj.shape}")
        b, n, _ = adj.shape
        active, verify = np.asarray(self.active), np.asarray(self.verify)
        for name, arr in (("active", active), ("verify", verify)):
            if arr.shape != (b, n) or arr.dtype != bool:
                raise ValueError(f"BatchRoundSpec {name} must be a bool array of shape {(b, n)}, got {arr.dtype} {arr.shape}")
        if ((adj != 0) & (adj != 1)).any():
            raise ValueError("BatchRoundSpec adjacency entries must be 0 or 1")
        adj = adj.astype(np.int8, copy=False)
        idx = np.arange(n)
        if adj[:, idx, idx].any():
            row, agent = (int(x[0]) for x in np.nonzero(adj[:, idx, idx]))
            raise ValueError(f"BatchRoundSpec episode {row}: self-loop at agent {agent}")
        touches = adj.astype(bool) & ~(active[:, :, None] & active[:, None, :])
        if touches.any():
            row, u, v = (int(x[0]) for x in np.nonzero(touches))
            raise ValueError(f"BatchRoundSpec episode {row}: edge {u}->{v} touches an inactive agent")
        if (verify & ~active).any():
            row, agent = (int(x[0]) for x in np.nonzero(verify & ~active))
            raise ValueError(f"BatchRoundSpec episode {row}: verifies inactive agent {agent}")
        object.__setattr__(self, "adjacency", adj)
        if self.recall is not None:
            recall = np.asarray(self.recall)
            if recall.shape != (b, n, n) or recall.dtype != bool:
                raise ValueError(f"BatchRoundSpec recall must be a bool array of shape {(b, n, n)}, "
                                 f"got {recall.dtype} {recall.shape}")
            if recall[:, idx, idx].any():
                row, agent = (int(x[0]) for x in np.nonzero(recall[:, idx, idx]))
                raise ValueError(f"BatchRoundSpec episode {row}: recall self-loop at agent {agent}")
            if (recall.any(axis=1) & ~active).any():
                row, agent = (int(x[0]) for x in np.nonzero(recall.any(axis=1) & ~active))
                raise ValueError(f"BatchRoundSpec episode {row}: recalls to inactive agent {agent}")
            object.__setattr__(self, "recall", recall if recall.any() else None)

    @classmethod
    def idle(cls, batch: int, n_agents: int) -> "BatchRoundSpec":
        """A round in which nobody is called (what follows an episode's halt)."""
        return cls(np.zeros((batch, n_agents, n_agents), np.int8), np.zeros((batch, n_agents), bool),
                   np.zeros((batch, n_agents), bool))


@dataclass
class Outputs:
    """Per-agent outputs (B, N): answer label, confidence, content tokens, verdict."""

    label: np.ndarray
    conf: np.ndarray
    content: np.ndarray
    verdict: np.ndarray

    @classmethod
    def empty(cls, b: int, n: int) -> "Outputs":
        return cls(np.full((b, n), -1, np.int64), np.zeros((b, n)), np.zeros((b, n), np.int64),
                   np.zeros((b, n), np.int64))

    def take(self, idx: np.ndarray) -> "Outputs":
        return Outputs(*(getattr(self, f.name)[idx] for f in fields(self)))

    def copy(self) -> "Outputs":
        return Outputs(*(getattr(self, f.name).copy() for f in fields(self)))


@dataclass
class BatchState:
    """Where B episodes stand between rounds."""

    round: int
    previous: Outputs | None  # last round's finals (None before round 0)
    tokens: np.ndarray  # (B,) team tokens so far
    agent_tokens: np.ndarray  # (B, N)
    adjacency: list[np.ndarray]  # per finished round, (B, N, N)
    calls: list[np.ndarray]  # per finished round, (B, N)
    adversaries: np.ndarray  # (B, N) bool: who plays an adversary in each episode
    ran: np.ndarray  # (B, N) bool: who has run at least once (their outputs reach the decision node)

    def take(self, idx: np.ndarray) -> "BatchState":
        return BatchState(self.round, None if self.previous is None else self.previous.take(idx),
                          self.tokens[idx], self.agent_tokens[idx], [a[idx] for a in self.adjacency],
                          [c[idx] for c in self.calls], self.adversaries[idx], self.ran[idx])


@dataclass(frozen=True)
class BatchResult:
    """Outcome of B episodes."""

    reward: np.ndarray  # (B,)
    accuracy: np.ndarray  # (B,) 0/1
    tokens: np.ndarray  # (B,) team tokens incl. the decision node
    agent_tokens: np.ndarray  # (B, N)
    adjacency: np.ndarray  # (B, T, N, N)
    calls: np.ndarray  # (B, T, N)
    decision_label: np.ndarray  # (B,)
    decision_calls: int = 1  # LLM calls of each decision: 1 the decision node's, 0 a vote's or one agent's

    @property
    def density(self) -> np.ndarray:
        """(B,) mean density over rounds."""
        n = self.adjacency.shape[-1]
        return self.adjacency.sum(axis=(2, 3)).mean(axis=1) / (n * (n - 1))


class BatchSimulator:
    """The simulated team for B episodes at once, round by round from :class:`BatchRoundSpec` s.
    ``target_rule`` is kept for the CommAction adapter of the front-end (it resolves targets).

    Adversaries: ``adversarial_agents`` (fixed) play adversaries in every episode unless
    :meth:`run` / :meth:`initial_state` get a per-episode (B, N) mask, e.g. from
    :meth:`sample_adversaries` (``adversary_position="random"``) or from the env's
    ``adversaries`` of the same episodes.
    """

    def __init__(self, profile: SimProfile, n_agents: int = 3, rounds: int = 2, roles: tuple[str, ...] | None = None,
                 adversarial_agents: tuple[int, ...] = (), target_rule: str = "disagree", w_acc: float = 1.25,
                 w_tok: float = 0.10, max_tokens: int = 10000, adversary_position: str = "fixed",
                 n_adversaries: int | None = None, team: tuple | None = None,
                 decision: DecisionMode | str = LLM_DECISION):
        placement = TeamPlacement(n_agents, rounds, roles, adversarial_agents, adversary_position, n_adversaries)
        self.profile = profile
        self.decision = parse_decision(decision, n_agents)  # the decision node, a vote or one agent
        self.n, self.rounds = placement.n_agents, placement.rounds
        self.roles = placement.roles
        self.adversary_position, self.n_adversaries = placement.adversary_position, placement.adversary_count
        self.adversarial = np.zeros(n_agents, dtype=bool)  # the fixed placement (none when random)
        self.adversarial[list(placement.adversarial_agents)] = True
        self.target_rule, self.w_acc, self.w_tok, self.max_tokens = target_rule, w_acc, w_tok, max_tokens
        self._cdf = np.array(wrong_label_cdf(profile))
        self._plans = PlanCache()
        models = profile.team_models(n_agents, team)
        self.team = tuple(m.name for m in models)
        self._skill = np.array(profile.skills(n_agents, team), dtype=np.float64)  # (N, S)
        self._verbosity = [m.verbosity for m in models]
        self._strength = np.array(profile.subject_offsets, dtype=np.float64) + self._skill  # (N, S): b_s + k_is
        self._verif = np.array(profile.verifiability, dtype=np.float64)

    @classmethod
    def from_config(cls, config: Any, profile: SimProfile | None = None) -> "BatchSimulator":
        return cls(profile or get_profile(config.backend.profile), config.n_agents, config.rounds, config.roles,
                   config.adversarial_agents, config.target_rule, config.w_acc, config.w_tok, config.max_tokens,
                   config.adversary_position, config.n_adversaries, config.backend.team, settings_decision(config))

    # -- sampling ------------------------------------------------------------------------
    def sample(self, rng: np.random.Generator, batch: int) -> tuple[TaskArrays, EpisodeNoise]:
        """Tasks and noise for ``batch`` episodes."""
        return TaskArrays.sample(rng, self.profile, batch), draw_noise(rng, self.profile, batch, self.rounds, self.n)

    def sample_adversaries(self, rng: np.random.Generator, batch: int) -> np.ndarray:
        """(B, N) bool adversary masks: the fixed placement in every row, or with
        ``adversary_position="random"`` ``n_adversaries`` distinct agents per row, uniformly."""
        if self.adversary_position == "fixed":
            return np.broadcast_to(self.adversarial, (batch, self.n)).copy()
        ranks = rng.random((batch, self.n)).argsort(axis=1)
        mask = np.zeros((batch, self.n), dtype=bool)
        np.put_along_axis(mask, ranks[:, : self.n_adversaries], True, axis=1)
        return mask

    # -- running -------------------------------------------------------------------------
    def initial_state(self, batch: int, adversaries: np.ndarray | None = None) -> BatchState:
        """Before round 0. ``adversaries``: (B, N) bool per-episode placement (None: the fixed one)."""
        if adversaries is None:
            if self.adversary_position == "random":
                raise ValueError("adversary_position='random': pass a (B, N) adversaries mask "
                                 "(e.g. sample_adversaries(rng, B))")
            mask = np.broadcast_to(self.adversarial, (batch, self.n))
        else:
            mask = np.asarray(adversaries)
            if mask.shape != (batch, self.n) or mask.dtype != bool:
                raise ValueError(f"adversaries must be a bool array of shape (B, N) = {(batch, self.n)}, "
                                 f"got {mask.dtype} {mask.shape}")
            if (mask.sum(axis=1) >= self.n).any():
                raise ValueError("adversaries: some episode has no honest agent")
        return BatchState(0, None, np.zeros(batch, np.int64), np.zeros((batch, self.n), np.int64), [], [], mask,
                          np.zeros((batch, self.n), dtype=bool))

    def run_spec(self, state: BatchState, spec: BatchRoundSpec, tasks: TaskArrays, noise: EpisodeNoise) -> BatchState:
        """One round for every episode: layers, calls, verification and recalls, as the engine runs a
        :class:`topo_env.engine.episode.RoundSpec` (inactive agents keep their last output)."""
        t, n = state.round, self.n
        adj = spec.adjacency
        b = adj.shape[0]
        if adj.shape[1] != n or b != state.tokens.shape[0]:
            raise ValueError(f"BatchRoundSpec is for {b} episodes of {adj.shape[1]} agents; the state holds "
                             f"{state.tokens.shape[0]} episodes of {n}")
        if t >= self.rounds:
            raise ValueError(f"all {self.rounds} rounds have run: call finish()")
        prev = state.previous
        layer, comp, multi = self._plans.plan_arrays(adj)
        active, ran = spec.active, state.ran
        recall = None  # recall[b, u, v] where u has an output to recall (the engine drops the others)
        if spec.recall is not None and prev is not None and (spec.recall & ran[:, :, None]).any():
            recall = spec.recall & ran[:, :, None]
        finals = Outputs.empty(b, n) if prev is None else prev.copy()
        drafts = Outputs.empty(b, n)
        tokens = np.zeros((b, n), np.int64)
        calls = np.zeros((b, n), np.int64)
        call_noise = noise.calls[:, t]  # (B, N, 2, L)
        verifying = spec.verify
        for li in range(n):
            at_layer = (layer == li) & active
            if not at_layer.any():
                continue
            for i in range(n):
                for has_previous, rows in _split_rows(at_layer[:, i], ran[:, i], b):
                    previous = _row_inputs(prev, rows, i) if has_previous else None
                    shown = []
                    if li > 0:  # layer 0 has no predecessors outside its components
                        outside = adj[rows, :, i].astype(bool) & (comp[rows] != comp[rows, i][:, None])
                        shown = [(outside[:, j], _row_inputs(finals, rows, j)) for j in range(n) if outside[:, j].any()]
                    if recall is not None:
                        shown += _recalled(recall, prev, rows, i)
                    nz = call_noise[rows, i, 0]
                    out = self._call(i, rows, tasks, previous, shown, nz, noise.blind[rows, i],
                                     state.adversaries[rows, i])
                    self._store(out, rows, i, multi[rows, i], finals, drafts, verifying, nz, tasks)
                    tokens[rows, i] += out.prompt_tokens + out.completion_tokens
                    calls[rows, i] += 1
            for i in range(n):
                rows = _rows(at_layer[:, i] & multi[:, i], b)
                if rows is None:
                    continue
                pred = adj[rows, :, i].astype(bool)
                inside = comp[rows] == comp[rows, i][:, None]
                shown = []
                for j in range(n):
                    if pred[:, j].any():
                        fin, dra = _row_inputs(finals, rows, j), _row_inputs(drafts, rows, j)
                        ins = inside[:, j]
                        shown.append((pred[:, j], Input(*(np.where(ins, d, f) for d, f in zip(dra, fin)))))
                if recall is not None:
                    shown += _recalled(recall, prev, rows, i)
                own_draft = _row_inputs(drafts, rows, i)
                nz = call_noise[rows, i, 1]
                out = self._call(i, rows, tasks, own_draft, shown, nz, noise.blind[rows, i], state.adversaries[rows, i])
                self._store(out, rows, i, None, finals, drafts, verifying, nz, tasks)
                tokens[rows, i] += out.prompt_tokens + out.completion_tokens
                calls[rows, i] += 1
        return BatchState(t + 1, finals, state.tokens + tokens.sum(axis=1), state.agent_tokens + tokens,
                          state.adjacency + [adj], state.calls + [calls], state.adversaries, ran | active)

    def run_specs(self, rounds: list[BatchRoundSpec], tasks: TaskArrays, noise: EpisodeNoise,
                  adversaries: np.ndarray | None = None) -> BatchResult:
        """Whole episodes from one :class:`BatchRoundSpec` per round (1..T of them; an episode
        halts after its last non-idle round), then the decision node."""
        b = len(tasks.difficulty)
        if not 1 <= len(rounds) <= self.rounds:
            raise ValueError(f"run_specs needs 1..{self.rounds} rounds, got {len(rounds)}")
        state = self.initial_state(b, adversaries)
        for spec in rounds:
            state = self.run_spec(state, spec, tasks, noise)
        return self.finish(state, tasks, noise)

    def finish(self, state: BatchState, tasks: TaskArrays, noise: EpisodeNoise) -> BatchResult:
        """The decision node answers from the last output of every agent that ran; score and reward."""
        if state.previous is None:
            raise ValueError("finish() before any round: run at least one round")
        label, tokens = self.decide(state, tasks, noise)
        accuracy = (label == 0).astype(np.float64)
        reward = self.w_acc * accuracy - self.w_tok * np.minimum(tokens / self.max_tokens, 1.0)
        return BatchResult(reward, accuracy, tokens, state.agent_tokens, np.stack(state.adjacency, axis=1),
                           np.stack(state.calls, axis=1), label, self.decision.calls)

    def decide(self, state: BatchState, tasks: TaskArrays, noise: EpisodeNoise) -> tuple[np.ndarray, np.ndarray]:
        """The decision node's answer from the last output of every agent that ran (none: from the
        task alone), whatever round each episode is at: (B,) answer labels (0 correct) and (B,) team
        tokens with the decision's. ``state.previous`` must be set (:meth:`Outputs.empty` before any
        round)."""
        rows = np.arange(state.tokens.shape[0])
        senders = [j for j in range(self.n) if state.ran[:, j].any()]
        shown = [(state.ran[:, j], _row_inputs(state.previous, rows, j)) for j in senders]
        task = TaskFeatures(tasks.difficulty, tasks.latent, tasks.prompt_tokens, self._verif[tasks.subject])
        if self.decision.kind == "llm":
            decision = simulate_decision(ARRAYS, self.profile, self._cdf, task, shown, noise.decision.T)
        else:  # a vote or one agent's answer: no decision call, no tokens
            decision = simulate_vote(ARRAYS, shown, senders, self.decision.agent, state.tokens)
        return decision.label, state.tokens + decision.prompt_tokens + decision.completion_tokens

    def direct(self, tasks: TaskArrays, noise: EpisodeNoise, agent: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """Agent ``agent`` answering alone once ("Base (direct)"): (accuracy, tokens), drawn from
        ``noise.decision`` and ``noise.blind``."""
        rows = slice(None)
        out = self._call(agent, rows, tasks, None, [], noise.decision, noise.blind[:, agent], False)
        return (out.label == 0).astype(np.float64), out.prompt_tokens + out.completion_tokens

    # -- the model (topo_env.sim.model) on arrays: one entry per row -----------------------
    def _call(self, agent: int, rows, tasks: TaskArrays, previous: Input | None, shown: list[tuple[np.ndarray, Input]],
              noise: np.ndarray, blind: np.ndarray, adversarial: bool | np.ndarray = False) -> SimOutput:
        """Agent ``agent``'s call for each of ``rows`` (:func:`topo_env.sim.model.simulate_call`).

        ``previous``: own previous output ((m,) fields) or None; ``shown``: (mask, input) per sender
        in sender order, the mask saying in which rows that sender's output is shown; ``noise`` (m, L)
        the calls' noise, ``blind`` (m,) the agent's blind spot, ``adversarial`` one bool or an (m,)
        mask. Returns (m,) arrays."""
        s = tasks.subject[rows]
        task = TaskFeatures(tasks.difficulty[rows], tasks.latent[rows], tasks.prompt_tokens[rows], self._verif[s])
        features = AgentFeatures(self.roles[agent], self._strength[agent][s], self._skill[agent][s], blind,
                                 self._verbosity[agent], adversarial)
        return simulate_call(ARRAYS, self.profile, self._cdf, task, features, previous, shown, noise.T)

    def _store(self, out: SimOutput, rows, i, is_draft, finals: Outputs, drafts: Outputs, verifying, noise,
               tasks: TaskArrays) -> None:
        """Write one call's outputs: to ``drafts`` where ``is_draft`` (None: nowhere), else
        to ``finals``, with the verifier's verdict where the agent chose execute_verify."""
        label, conf, content = out.label, out.confidence, out.content_tokens
        checked = verifying[rows, i]
        if checked.any():
            verdict = np.where(checked, simulate_verdict(ARRAYS, self.profile, label, noise.T,
                                                         self._verif[tasks.subject[rows]]), VERDICT_NONE)
        else:
            verdict = np.zeros(label.shape, np.int64)
        if is_draft is None or not is_draft.any():
            parts = ((finals, rows, slice(None)),)
        else:
            idx = np.arange(label.shape[0]) if isinstance(rows, slice) else rows
            parts = ((drafts, idx[is_draft], is_draft), (finals, idx[~is_draft], ~is_draft))
        for target, rr, sel in parts:
            target.label[rr, i] = label[sel]
            target.conf[rr, i] = conf[sel]
            target.content[rr, i] = content[sel]
            target.verdict[rr, i] = verdict[sel]


def _split_rows(mask: np.ndarray, ran: np.ndarray, batch: int):
    """The rows of a (B,) mask split by whether the agent has run before (and so has a previous
    output): ``(True, rows)`` and/or ``(False, rows)``, each row selector as :func:`_rows` gives it.
    The usual cases (everyone ran, or nobody yet) cost one selection."""
    everyone = bool(ran.all())
    if everyone or not ran.any():
        rows = _rows(mask, batch)
        return [] if rows is None else [(everyone, rows)]
    parts = []
    for has_previous, part in ((True, ran), (False, ~ran)):
        rows = _rows(mask & part, batch)
        if rows is not None:
            parts.append((has_previous, rows))
    return parts


def _rows(mask: np.ndarray, batch: int) -> np.ndarray | slice | None:
    """Row selector for a (B,) mask: None if empty, ``slice(None)`` if all (basic
    indexing, no copies of index arrays), else the row indices."""
    rows = np.flatnonzero(mask)
    if rows.size == 0:
        return None
    return slice(None) if rows.size == batch else rows


def _recalled(recall: np.ndarray, outputs: Outputs, rows, i: int) -> list[tuple[np.ndarray, Input]]:
    """What agent i recalls in the given rows, shown after the round's messages: per sender u in
    order, (the rows where ``recall[row, u, i]``, u's output before the round)."""
    sel = recall[rows, :, i]
    return [(sel[:, u], _row_inputs(outputs, rows, u)) for u in range(sel.shape[1]) if sel[:, u].any()]


def _row_inputs(outputs: Outputs, rows: np.ndarray, i: int) -> Input:
    """Agent i's output in the given rows, as the model's input ((m,) arrays)."""
    return Input(outputs.label[rows, i], outputs.conf[rows, i], outputs.content[rows, i], outputs.verdict[rows, i])
