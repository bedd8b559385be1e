"""Headroom: how much a privileged adaptive controller gains over the best fixed sequence.

``python -m topo_env.references.oracle_cli --profile P --headroom [--adversary random] [--episodes E] [--seed S] [--json]``
compares, on the same held-out episodes (stream "eval", common random numbers: the same tasks,
noise and adversary placements), two references:

* ``best_fixed``: the best open-loop joint-action sequence, one for every task, found as
  :func:`topo_env.references.oracle.search` finds it: all 6^(N*T) sequences scored on M episodes (stream
  "train"), the best ``shortlist`` and the fixed baselines re-ranked on R fresh ones ("rerank");
* ``adaptive``: a privileged reference that knows each episode's hidden context
  (:func:`hidden_context`: the subject, the difficulty bucket and the
  adversaries' positions) and, before round 2, sees round 1's outcome (:func:`agreement_class`:
  all agree / one named agent alone / all differ). Its policy class: per context, a first-round
  joint action and per outcome class a second-round joint action. It is searched in two stages:
  on the "train" episodes, per context, the ``context_shortlist`` best open-loop sequences and the
  ``context_shortlist`` best first rounds each with its best second round per outcome class (an
  outcome class seen fewer than :data:`MIN_CLASS_EPISODES` times there plays the first round's best
  second round for the context overall); on the "rerank" episodes each context picks the best of
  those candidates and of ``best_fixed``'s sequence. It is therefore never below ``best_fixed`` on
  the re-ranking episodes, and a lower bound of what adapting can earn (a learned policy may beat
  it). ``context_only`` is the same search restricted to open-loop sequences per context (what
  knowing the context alone earns, without seeing round 1).

``headroom = adaptive - best_fixed`` on the held-out episodes, with its paired standard error.

That is the search for N = 3, T <= 2 (every sequence enumerated). For any other team the same three references
are searched by coordinate ascent (:func:`select_searched_references`, on the same episodes); policies are
(T, K, N) arrays for any T (:class:`References`: round t >= 1 after each outcome class of round t - 1). On
N = 3, T = 2 (seed 0, 20,000 held-out episodes; ``python -m experiments.searched_references_check``) the
searched ``best_fixed`` and ``context_only`` are the enumerated ones (context only: +0.0019 on mmlu_pro),
and the searched ``adaptive`` is +0.0015 (paired SE 0.0009) from the enumerated one on mmlu_pro and
+0.0009 (0.0008) on humaneval, whose best closed-loop policies need a first round that pays only with
second rounds of its own (:func:`_round_with_own_replies`). It is a lower bound of what adapting earns.

Everything goes through :class:`~topo_env.sim.batch.BatchSimulator`'s public API and the fields of
:class:`~topo_env.sim.batch.TaskArrays`, so the measurement works unchanged when the model changes;
a model with more hidden variables (e.g. a subject) adds a column in :func:`hidden_context`.
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from dataclasses import dataclass
from typing import Any

import numpy as np
from tqdm import tqdm

from topo_env.engine.cli import format_table
from topo_env.engine.threads import one_blas_thread
from topo_env.frontends.comm_actions import N_ACTIONS
from topo_env.references import search
from topo_env.references.baselines import FIXED_BASELINES, open_loop_actions
from topo_env.references.oracle import (
    DEFAULT_CHUNK_ROWS, DEFAULT_CONTEXT_SHORTLIST, DEFAULT_HEADROOM_SAMPLES, DEFAULT_LARGE_SAMPLES, DEFAULT_SHORTLIST,
    ORACLE_AGENTS, baseline_indices, sample_episodes, joint_actions, sequence_actions,
    sequence_group_sums, sequence_names, sequence_rewards, standard_error,
)
from topo_env.sim.batch import BatchResult, BatchState, TaskArrays
from topo_env.frontends.comm_batch import CommBatchSimulator
from topo_env.sim.model import EpisodeNoise
from topo_env.frontends.env_config import EnvConfig
from topo_env.sim.profiles import get_profile, profile_to_dict
from topo_env.sim.tasks import TextReader
from topo_env.engine.tasks import DIFFICULTY_BUCKETS

CONTEXT_VARIABLES = ("subject", "difficulty_bucket", "adversaries")
"""The hidden variables the adaptive reference knows, one column each of :func:`hidden_context`."""
MIN_CLASS_EPISODES = 30
"""A (context, first round, outcome class) seen fewer times in the "train" episodes gets no second round of its own."""
ADVERSARY_SETTINGS = ("none", "random")


def hidden_context(tasks: TaskArrays, adversaries: np.ndarray) -> np.ndarray:
    """(B, len(CONTEXT_VARIABLES)) int64: per episode the hidden variables the adaptive reference knows.

    Columns: the subject index (``TaskArrays.subject``); the difficulty bucket (``TaskArrays.bucket``);
    the adversaries as a bitmask (bit i: agent i is an adversary; 0: none). The one place a model with
    more hidden variables adds its own."""
    mask = (np.asarray(adversaries, dtype=np.int64) << np.arange(adversaries.shape[1])).sum(axis=1)
    return np.stack([tasks.subject, tasks.bucket, mask], axis=1).astype(np.int64)


def readable_context(profile, seed: int = 0) -> Callable[[TaskArrays, np.ndarray], np.ndarray]:
    """A context function like :func:`hidden_context` with what a reader of the task text can know:
    column 0 the subject a Bayes-optimal reader infers from the text's cue words
    (:class:`~topo_env.sim.tasks.TextReader`; for task features without text, from cue words drawn
    as the generator draws them), the other columns 0 (the difficulty bucket it reads would split
    the contexts for less than the selection noise costs; the adversaries are not readable).
    Searched with it, the adaptive reference is a policy that an observation-reading controller can
    imitate: training's teacher (:mod:`learners.teacher`). Calls draw from ``default_rng([seed,
    call number])``, so a search is reproducible."""
    reader = TextReader(profile)
    calls = iter(range(1 << 62))

    def context(tasks: TaskArrays, adversaries: np.ndarray) -> np.ndarray:
        subject, _ = reader.read_drawn(tasks.subject, tasks.bucket, np.random.default_rng([int(seed), next(calls)]))
        return readable_rows(subject)

    return context


def readable_rows(subjects: np.ndarray) -> np.ndarray:
    """(B, 3) :func:`readable_context` rows of the subjects a reader inferred ((B,))."""
    subjects = np.asarray(subjects, dtype=np.int64)
    return np.stack([subjects, np.zeros_like(subjects), np.zeros_like(subjects)], axis=1)


CONTEXTS = ("hidden", "readable")
"""What a reference may condition on: the hidden variables (the headroom references) or what the
task text tells a reader (:func:`readable_context`: the teacher)."""


def context_description(values: np.ndarray, subjects: tuple[str, ...]) -> dict[str, Any]:
    """A row of :func:`hidden_context` in words (``subjects``: the profile's subject names)."""
    subject, bucket, mask = (int(v) for v in values)
    return {"subject": subjects[subject], "difficulty_bucket": DIFFICULTY_BUCKETS[bucket],
            "adversaries": [i for i in range(mask.bit_length()) if mask >> i & 1]}


def agreement_class(labels: np.ndarray) -> np.ndarray:
    """(B,) int64 round-1 outcome class of (B, N) answer labels: 0 all agree, 1 + i agent i alone
    disagrees with the others (who agree), N + 1 any other pattern (for N = 3: all differ)."""
    labels = np.asarray(labels)
    b, n = labels.shape
    same = labels[:, :, None] == labels[:, None, :]  # (B, N, N)
    out = np.full(b, n + 1, dtype=np.int64)
    for i in range(n):
        others = np.delete(np.arange(n), i)
        alone = ~same[:, i, others].any(axis=1) & same[:, others[0]][:, others].all(axis=1)
        out[alone] = 1 + i
    out[same.all(axis=(1, 2))] = 0
    return out


def outcome_names(n_agents: int) -> list[str]:
    """The names of :func:`agreement_class`'s classes."""
    return ["all agree", *[f"agent {i} alone" for i in range(n_agents)], "all differ" if n_agents == 3 else "other"]


def policy_candidates(sums: np.ndarray, counts: np.ndarray, shortlist: int,
                      min_class_episodes: int = MIN_CLASS_EPISODES) -> np.ndarray:
    """Stage 1 of the adaptive search: candidate policies per context from the selection sums.

    Args:
        sums: (J, J2, C, K) total reward of first-round joint action j then second-round j2 over the
            episodes in context c whose round-1 outcome (after j) is class k (J2 = K = 1 for T = 1).
        counts: (J, C, K) how many episodes are in (c, k) after first round j.
        shortlist: open-loop and closed-loop candidates kept per context.

    Returns:
        (C, 2 * shortlist, 1 + K) int64 policies (T = 2; (C, shortlist, 1) for T = 1): column 0 the
        first-round joint action, column 1 + k the second round after outcome class k. Per context the
        ``shortlist`` best open-loop sequences (the same second round for every class), then the
        ``shortlist`` best first rounds each with its best second round per class, where a class
        with fewer than ``min_class_episodes`` episodes plays the best second round for the context.
    """
    n_first, n_second, n_context, n_class = sums.shape
    shortlist = min(shortlist, n_first * n_second, n_first)
    context_sums = sums.sum(axis=3)  # (J, J2, C)
    flat = context_sums.reshape(n_first * n_second, n_context)
    open_seq = np.argsort(-flat, axis=0, kind="stable")[:shortlist].T  # (C, L) sequence indices
    first, second = np.divmod(open_seq, n_second)
    open_loop = np.concatenate([first[..., None], np.repeat(second[..., None], n_class, axis=2)], axis=2)
    if n_second == 1:
        return open_loop[..., :1]
    best_second = context_sums.argmax(axis=1)  # (J, C): the first round's best second round per context
    per_class = sums.argmax(axis=1)  # (J, C, K)
    fallback = counts < min_class_episodes
    per_class = np.where(fallback, best_second[:, :, None], per_class)
    value = np.take_along_axis(sums, per_class[:, None], axis=1)[:, 0].sum(axis=2)  # (J, C)
    closed_first = np.argsort(-value, axis=0, kind="stable")[:shortlist].T  # (C, L)
    closed = np.concatenate([closed_first[..., None],
                             per_class[closed_first, np.arange(n_context)[:, None]]], axis=2)
    return np.concatenate([open_loop, closed], axis=1)


def play_policies(sim: CommBatchSimulator, policies: np.ndarray, tasks: TaskArrays, noise: EpisodeNoise,
                  adversaries: np.ndarray) -> BatchResult:
    """Episode b plays ``policies[b]`` ((B, T, K, N) as in :class:`References`): round 0 the joint action
    ``policies[b, 0, 0]``, round t >= 1 ``policies[b, t, k]`` where k is round t - 1's outcome class
    (:func:`agreement_class`)."""
    b = len(tasks.difficulty)
    return play_rounds(sim, sim.initial_state(b, adversaries), policies, np.arange(b), np.zeros(b, np.int64), 0,
                       tasks, noise)


def play_rounds(sim: CommBatchSimulator, state: BatchState, policies: np.ndarray, policy_of: np.ndarray,
                outcome: np.ndarray, t: int, tasks: TaskArrays, noise: EpisodeNoise) -> BatchResult:
    """The B episodes of ``state`` (before round ``t``; ``outcome`` (B,) round t - 1's class, zeros for
    t = 0) played to the end: episode b plays ``policies[policy_of[b]]`` ((P, T, K, N) policies) in rounds
    t..T-1, each round after the class of the round before."""
    for r in range(t, sim.rounds):
        if r > t:
            outcome = agreement_class(state.previous.label)
        state = sim.run_round(state, policies[policy_of, r, outcome], tasks, noise)
    return sim.finish(state, tasks, noise)


def play_trials(sim: CommBatchSimulator, state: BatchState, trials: np.ndarray, policy_of: np.ndarray,
                outcome: np.ndarray, t: int, tasks: TaskArrays, noise: EpisodeNoise,
                chunk_rows: int = DEFAULT_CHUNK_ROWS) -> np.ndarray:
    """(V, B) rewards of :func:`play_rounds` once per trial: the B episodes of ``state`` played to the end
    with trial v's policies (``trials`` (V, P, T, K, N); episode b plays ``trials[v, policy_of[b]]``). The V
    copies of the B episodes run as batches of at most ``chunk_rows`` rows, not one small batch per trial:
    episodes are independent rows of the batch simulator, so each row's reward is what a batch of its own
    gives."""
    n_trials, n_policies = trials.shape[:2]
    b = len(policy_of)
    flat = trials.reshape(n_trials * n_policies, *trials.shape[2:])
    per_batch = max(1, int(chunk_rows) // max(b, 1))
    out = np.empty((n_trials, b))
    for first in range(0, n_trials, per_batch):
        last = min(first + per_batch, n_trials)
        rows = np.tile(np.arange(b), last - first)
        which = np.repeat(np.arange(first, last), b) * n_policies + policy_of[rows]
        result = play_rounds(sim, state.take(rows), flat, which, outcome[rows], t, tasks.take(rows), noise.take(rows))
        out[first:last] = result.reward.reshape(last - first, b)
    return out


def rerank_candidates(sim: CommBatchSimulator, candidates: np.ndarray, context: np.ndarray, tasks: TaskArrays,
                      noise: EpisodeNoise, adversaries: np.ndarray) -> np.ndarray:
    """(L, R) reward of candidate slot l on each of the R episodes, where episode r plays its own context's
    candidate ``candidates[context[r], l]`` ((C, L, T, K, N) policies; ``context`` (R,) context ids)."""
    return np.stack([play_policies(sim, candidates[context, slot], tasks, noise, adversaries).reward
                     for slot in range(candidates.shape[1])])


def open_loop_policy(actions: np.ndarray, n_classes: int) -> np.ndarray:
    """The (T, K, N) policy of the open-loop sequence ``actions`` (T, N): the same joint action after every
    outcome class."""
    actions = np.asarray(actions, dtype=np.int64)
    return np.repeat(actions[:, None, :], n_classes, axis=1)


def index_policies(policies: np.ndarray, sim: CommBatchSimulator) -> np.ndarray:
    """(..., T, K, N) policies of the exhaustive search's joint-action indices (..., 1 + K) (:func:`policy_candidates`;
    (..., 1) for T = 1): round 0 the first column's joint action, round 1 after class k column 1 + k's."""
    table = joint_actions(sim.n)
    policies = np.asarray(policies, dtype=np.int64)
    n_classes = len(outcome_names(sim.n))
    first = np.repeat(table[policies[..., :1]], n_classes, axis=-2)  # (..., K, N)
    if sim.rounds == 1:
        return first[..., None, :, :]
    return np.stack([first, table[policies[..., 1:]]], axis=-3)


@dataclass(frozen=True)
class References:
    """The headroom references as policies any batch of episodes can play.

    ``fixed``: (T, N) the best fixed open-loop sequence; ``contexts``: (C, V) the context rows seen in
    selection (columns of the ``context`` function used, :func:`hidden_context` by default);
    ``adaptive`` and ``context_only``: (C, T, K, N) policies per context row: round 0's joint action
    (``[c, 0, 0]``; the other classes repeat it) and, for round t >= 1, the joint action after each of
    round t - 1's K outcome classes (:func:`agreement_class`, :func:`outcome_names`). A context never
    seen in selection plays the best fixed sequence."""

    fixed: np.ndarray
    contexts: np.ndarray
    adaptive: np.ndarray
    context_only: np.ndarray

    def policies(self, name: str, context_rows: np.ndarray, sim: CommBatchSimulator) -> np.ndarray:
        """(B, T, K, N) policy of reference ``name`` ("best_fixed", "adaptive", "context_only") for each row
        of ``context_rows`` (B, V)."""
        fixed = open_loop_policy(self.fixed, len(outcome_names(sim.n)))
        rows = np.broadcast_to(fixed, (len(context_rows), *fixed.shape)).copy()
        if name == "best_fixed":
            return rows
        table = {"adaptive": self.adaptive, "context_only": self.context_only}[name]
        lookup = {tuple(int(v) for v in row): c for c, row in enumerate(self.contexts)}
        for b, row in enumerate(np.asarray(context_rows)):
            c = lookup.get(tuple(int(v) for v in row))
            if c is not None:
                rows[b] = table[c]
        return rows

    def to_dict(self) -> dict[str, Any]:
        return {"fixed": self.fixed.tolist(), "contexts": self.contexts.tolist(), "adaptive": self.adaptive.tolist(),
                "context_only": self.context_only.tolist()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "References":
        fixed, contexts, adaptive, context_only = (np.asarray(data[k], dtype=np.int64)
                                                   for k in ("fixed", "contexts", "adaptive", "context_only"))
        if fixed.ndim != 2 or adaptive.shape != context_only.shape or adaptive.shape[1::2] != fixed.shape \
                or len(adaptive) != len(contexts):
            raise ValueError("references of inconsistent shapes")
        return cls(fixed, contexts, adaptive, context_only)


REFERENCE_NAMES = ("best_fixed", "context_only", "adaptive")


def play_references(sim: CommBatchSimulator, references: References, tasks: TaskArrays, noise: EpisodeNoise,
                    adversaries: np.ndarray,
                    context: Callable[[TaskArrays, np.ndarray], np.ndarray] = hidden_context) -> dict[str, BatchResult]:
    """Each reference of :data:`REFERENCE_NAMES` played on the same B episodes (common random numbers)."""
    rows = context(tasks, adversaries)
    return {name: play_policies(sim, references.policies(name, rows, sim), tasks, noise, adversaries)
            for name in REFERENCE_NAMES}


def _selection_episodes(sim: CommBatchSimulator, seed: int, samples: int, rerank_samples: int,
                        context: Callable[[TaskArrays, np.ndarray], np.ndarray]):
    """The "train" and "rerank" episodes of ``seed``, the (C, V) context rows met in either, and each
    episode's context id (the row's index) in either set."""
    train = sample_episodes(sim, samples, seed, "train")
    rerank = sample_episodes(sim, rerank_samples, seed, "rerank")
    values = [context(tasks, adv) for tasks, _, adv in (train, rerank)]
    known, inverse = np.unique(np.concatenate(values), axis=0, return_inverse=True)
    inverse = inverse.reshape(-1)
    return train, rerank, known, inverse[:len(values[0])], inverse[len(values[0]):]


def select_references(sim: CommBatchSimulator, seed: int = 0, samples: int = DEFAULT_HEADROOM_SAMPLES,
                      rerank_samples: int = DEFAULT_LARGE_SAMPLES, shortlist: int = DEFAULT_SHORTLIST,
                      context_shortlist: int = DEFAULT_CONTEXT_SHORTLIST, progress: bool = True,
                      chunk_rows: int = DEFAULT_CHUNK_ROWS,
                      context: Callable[[TaskArrays, np.ndarray], np.ndarray] = hidden_context,
                      ) -> tuple[References, dict[str, Any]]:
    """Search the references (module docstring) on the oracle's "train" and "rerank" episodes of
    ``seed``. Returns them and the selection figures: ``selection`` (each reference's reward on the
    re-ranking episodes) and, per context, its row and the re-ranking episodes it had
    (``context_episodes``)."""
    train, rerank, known, train_ctx, rerank_ctx = _selection_episodes(sim, seed, samples, rerank_samples, context)
    n_context = len(known)
    n_class = len(outcome_names(sim.n)) if sim.rounds == 2 else 1

    # Stage 1 ("train"): every sequence summed per (context, round-1 outcome class).
    def group_of(state: BatchState) -> np.ndarray:
        outcome = agreement_class(state.previous.label) if sim.rounds == 2 else np.zeros(len(train_ctx), np.int64)
        return train_ctx * n_class + outcome

    sums, counts = sequence_group_sums(sim, train[0], train[1], group_of, n_context * n_class, adversaries=train[2],
                                       progress=progress, chunk_rows=chunk_rows)
    n_first = sums.shape[0]
    sums = sums.reshape(n_first, sums.shape[1], n_context, n_class)
    counts = counts.reshape(n_first, n_context, n_class)

    # Stage 2 ("rerank"): the best fixed sequence among the leaders and the baselines ...
    totals = sums.sum(axis=(2, 3)).reshape(-1)
    fixed_candidates = np.unique(np.concatenate([np.argsort(-totals, kind="stable")[:shortlist],
                                                 baseline_indices(sim)])).tolist()
    fixed_rerank = sequence_rewards(sim, fixed_candidates, *rerank)
    fixed = sequence_actions(fixed_candidates[int(fixed_rerank.mean(axis=1).argmax())], sim.rounds, sim.n)
    fixed_policy = open_loop_policy(fixed, len(outcome_names(sim.n)))
    # ... and per context the best of its candidates and the best fixed sequence (slot 0).
    candidates = index_policies(policy_candidates(sums, counts, context_shortlist), sim)
    candidates = np.concatenate([np.broadcast_to(fixed_policy, (n_context, 1, *fixed_policy.shape)), candidates],
                                axis=1)
    slot_rewards = rerank_candidates(sim, candidates, rerank_ctx, *rerank)
    slot_sums = np.stack([np.bincount(rerank_ctx, weights=r, minlength=n_context) for r in slot_rewards])  # (L, C)
    adaptive_slot = slot_sums.argmax(axis=0)  # (C,)
    context_slot = slot_sums[:1 + min(context_shortlist, n_first)].argmax(axis=0)  # slot 0 and the open-loop ones
    references = References(fixed, known.astype(np.int64),
                            candidates[np.arange(n_context), adaptive_slot],
                            candidates[np.arange(n_context), context_slot])
    rerank_rows = np.arange(len(rerank_ctx))
    selection = {
        "selection": {
            "best_fixed": float(slot_rewards[0].mean()),
            "adaptive": float(slot_rewards[adaptive_slot[rerank_ctx], rerank_rows].mean()),
            "context_only": float(slot_rewards[context_slot[rerank_ctx], rerank_rows].mean()),
        },
        "context_episodes": np.bincount(rerank_ctx, minlength=n_context).tolist(),
    }
    return references, selection


def exhaustive_feasible(sim: CommBatchSimulator) -> bool:
    """Whether :func:`select_references` (every sequence enumerated) covers ``sim``'s team: N = 3, T <= 2."""
    return sim.n == ORACLE_AGENTS and sim.rounds <= 2


def select_searched_references(sim: CommBatchSimulator, seed: int = 0, samples: int = DEFAULT_HEADROOM_SAMPLES,
                               rerank_samples: int = DEFAULT_LARGE_SAMPLES, progress: bool = True,
                               context: Callable[[TaskArrays, np.ndarray], np.ndarray] = hidden_context,
                               max_sweeps: int = search.MAX_SWEEPS,
                               context_shortlist: int = DEFAULT_CONTEXT_SHORTLIST,
                               context_starts: int = 12, adaptive_starts: int = 3,
                               checkpoint: Path | None = None) -> tuple[References, dict[str, Any]]:
    """The references of :func:`select_references` for a team of any size and number of rounds, searched
    instead of enumerated (:mod:`topo_env.references.search`'s coordinate ascent with common random numbers),
    on the same "train" and "rerank" episodes of ``seed``:

    * ``best_fixed``: :func:`topo_env.references.search.best_fixed_sequence`'s climbs on "train", its leaders
      and the baselines re-ranked on "rerank";
    * ``context_only``: per context an open-loop sequence, climbed one round's joint action (over
      :func:`joint_library`), then one (round, agent) action, at a time: each candidate is played by every
      context at once (each episode plays its own context's sequence) and each context keeps the best on its
      own episodes. Climbs start from ``best_fixed`` and from the baselines and uniform sequences
      (:func:`topo_env.references.search.starting_sequences`; ``context_starts`` climbs in all);
    * ``adaptive``: per context a (T, K, N) policy climbed the same way, per (round, outcome class of the round
      before): its joint action, then each agent's; a context whose episodes meet that class fewer than
      :data:`MIN_CLASS_EPISODES` times keeps its entry. It climbs from each context's ``adaptive_starts``
      best open-loop sequences (a first round that pays only with its own second rounds is out of reach of
      one climb from the best open-loop sequence).

    Each climb keeps per context the ``context_shortlist`` best distinct policies it met on "train"
    (:class:`ContextShortlist`); each context then keeps, on the "rerank" episodes, the best of ``best_fixed``
    and its open-loop ones (``context_only``), and of all of them (``adaptive``), as :func:`select_references`
    does with its candidates. Returns the references and the selection figures of :func:`select_references`.

    ``checkpoint``: a file where the search keeps what it has finished (the best fixed sequence, then each
    climb's shortlists); a search started again with the same file resumes after its last finished climb
    and ends with the same references, to the last bit, as one that never stopped. The caller removes it
    once the references are kept."""
    done = SearchCheckpoint(checkpoint)
    train, rerank, known, train_ctx, rerank_ctx = _selection_episodes(sim, seed, samples, rerank_samples, context)
    n_context, n_class = len(known), len(outcome_names(sim.n))
    found = done.get("best_fixed")
    if found is None:
        found = search.best_fixed_sequence(sim, seed=seed, samples=samples, rerank_samples=rerank_samples,
                                           eval_samples=1, progress=progress)
        done.save(best_fixed=found)
    fixed = search.chosen_actions(found)
    fixed_policy = open_loop_policy(fixed, n_class)
    # open loop (every class at once): whole joint actions, then one agent at a time; the first climb from the
    # best fixed sequence, then more from the baselines and the uniform sequences (one climb from the best
    # fixed sequence stops where a better sequence needs two rounds changed at once)
    coordinates = [(t, None, i) for t in range(sim.rounds) for i in (None, *range(sim.n))]
    others = [start for start in search.starting_sequences(sim) if not np.array_equal(start, fixed)]
    open_starts = [fixed, *others[:max(context_starts - 1, 0)]]
    policies = np.broadcast_to(fixed_policy, (n_context, *fixed_policy.shape)).copy()  # (C, T, K, N)
    open_loop = ContextShortlist(n_context, context_shortlist)
    if done.get("open_climbs"):
        policies = np.asarray(done.get("policies"), dtype=np.int64)
        open_loop = ContextShortlist.from_list(done.get("open_loop"), context_shortlist)
    for k in range(done.get("open_climbs") or 0, len(open_starts)):
        start_policies = np.broadcast_to(open_loop_policy(open_starts[k], n_class), policies.shape).copy()
        ended = _climb_per_context(sim, start_policies, coordinates, train, train_ctx, n_context, max_sweeps,
                                   progress, "context only" + (f" (start {k + 1})" if k else ""), open_loop)
        if k == 0:
            policies = ended  # every context's own climb from the best fixed sequence: the shortlists' fill
        done.save(open_climbs=k + 1, policies=policies.tolist(), open_loop=open_loop.to_list())
    closed = [(0, None, i) for i in (None, *range(sim.n))] + [
        (t, k, i) for t in range(1, sim.rounds) for k in range(n_class) for i in (None, *range(sim.n))]
    closed_loop = ContextShortlist(n_context, context_shortlist)
    if done.get("adaptive_climbs"):
        closed_loop = ContextShortlist.from_list(done.get("closed_loop"), context_shortlist)
    open_candidates = open_loop.stacked(policies)
    for start in range(done.get("adaptive_climbs") or 0, min(adaptive_starts, context_shortlist)):
        begin = open_candidates[:, start]
        for t in range(sim.rounds - 1):
            begin = _round_with_own_replies(sim, begin, t, train, train_ctx, n_context, closed_loop)
        _climb_per_context(sim, begin, closed, train, train_ctx, n_context, max_sweeps, progress,
                           f"adaptive (start {start + 1})", closed_loop)
        done.save(adaptive_climbs=start + 1, closed_loop=closed_loop.to_list())
    fixed_slot = np.broadcast_to(fixed_policy, (n_context, 1, *fixed_policy.shape))
    candidates = np.concatenate([fixed_slot, open_candidates, closed_loop.stacked(policies)], axis=1)
    slot_rewards = rerank_candidates(sim, candidates, rerank_ctx, *rerank)
    slot_sums = np.stack([np.bincount(rerank_ctx, weights=r, minlength=n_context) for r in slot_rewards])  # (L, C)
    adaptive_slot = slot_sums.argmax(axis=0)
    context_slot = slot_sums[:1 + context_shortlist].argmax(axis=0)  # best fixed and the open-loop ones
    references = References(fixed, known.astype(np.int64), candidates[np.arange(n_context), adaptive_slot],
                            candidates[np.arange(n_context), context_slot])
    rows = np.arange(len(rerank_ctx))
    selection = {"selection": {"best_fixed": float(slot_rewards[0].mean()),
                               "adaptive": float(slot_rewards[adaptive_slot[rerank_ctx], rows].mean()),
                               "context_only": float(slot_rewards[context_slot[rerank_ctx], rows].mean())},
                 "context_episodes": np.bincount(rerank_ctx, minlength=n_context).tolist()}
    return references, selection


def joint_library(sim: CommBatchSimulator) -> np.ndarray:
    """(J, N) the joint actions a block move of :func:`_climb_per_context` tries: every one for N <= 3
    (216), else :func:`named_joint_actions` (every agent's action changes at once, which one agent at a
    time cannot reach from a local optimum)."""
    return joint_actions(sim.n) if sim.n <= ORACLE_AGENTS else named_joint_actions(sim)


def named_joint_actions(sim: CommBatchSimulator) -> np.ndarray:
    """(J, N) the uniform joint actions and the fixed baselines' first rounds, without repeats."""
    rows = [np.full(sim.n, a, np.int64) for a in range(N_ACTIONS)]
    rows += [open_loop_actions(name, sim.n, 1, sim.roles)[0] for name in FIXED_BASELINES]
    return np.unique(np.stack(rows), axis=0)


def _round_with_own_replies(sim: CommBatchSimulator, policies: np.ndarray, t: int, episodes: Any,
                            episode_context: np.ndarray, n_context: int,
                            shortlist: ContextShortlist | None = None) -> np.ndarray:
    """The (C, T, K, N) ``policies`` where each context takes round ``t``'s joint action (over
    :func:`joint_library`) together with round t + 1's joint action chosen anew for each outcome class of
    round t (among the ones the policies play in round t + 1 and :func:`named_joint_actions`; a class met
    fewer than :data:`MIN_CLASS_EPISODES` times keeps its entry), where that pair beats its current policy
    on its own episodes. A move one coordinate at a time cannot reach a round that pays only with
    replies of its own; the enumeration of N = 3, T = 2 pairs every first round with its best replies."""
    tasks, noise, adversaries = episodes
    n_class, rows = policies.shape[2], len(episode_context)
    replies = np.unique(np.concatenate([policies[:, t + 1].reshape(-1, sim.n), named_joint_actions(sim)]), axis=0)
    prefix = sim.initial_state(rows, adversaries)
    for r in range(t):
        outcome = np.zeros(rows, np.int64) if r == 0 else agreement_class(prefix.previous.label)
        prefix = sim.run_round(prefix, policies[episode_context, r, outcome], tasks, noise)
    before = np.zeros(rows, np.int64) if t == 0 else agreement_class(prefix.previous.label)

    best = np.bincount(episode_context, minlength=n_context,
                       weights=play_rounds(sim, prefix, policies, episode_context, before, t, tasks, noise).reward)
    chosen: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for joint in joint_library(sim):
        trial = policies.copy()
        trial[:, t] = joint
        state = sim.run_round(prefix, trial[episode_context, t, before], tasks, noise)
        after = agreement_class(state.previous.label)
        group = episode_context * n_class + after
        seen = np.bincount(group, minlength=n_context * n_class).reshape(n_context, n_class)
        answered = np.repeat(trial[None], 1 + len(replies), axis=0)  # trial 0: the current replies
        answered[1:, :, t + 1] = replies[:, None, None, :]
        played = play_trials(sim, state, answered, episode_context, after, t + 1, tasks, noise)
        sums = np.stack([np.bincount(group, weights=r, minlength=n_context * n_class) for r in played])
        sums = sums.reshape(1 + len(replies), n_context, n_class)
        pick = np.where(seen >= MIN_CLASS_EPISODES, sums.argmax(axis=0), 0)  # (C, K); 0: the current entry
        value = np.take_along_axis(sums, pick[None], axis=0)[0].sum(axis=1)
        for c in np.flatnonzero(value > best + 1e-12):
            best[c] = value[c]
            policy = trial[c].copy()
            for k in np.flatnonzero(pick[c]):
                policy[t + 1, k] = replies[pick[c, k] - 1]
            chosen[c] = (policy, value[c])
    out = policies.copy()
    for c, (policy, value) in chosen.items():
        out[c] = policy
        if shortlist is not None:
            shortlist.offer(c, policy, value)
    return out


class ContextShortlist:
    """Per context the ``size`` best distinct (T, K, N) policies a climb met, by their reward summed over
    the context's "train" episodes: the candidates the "rerank" episodes then choose among, as the
    enumerated search's ``context_shortlist`` are (choosing on the climb's own episodes alone overfits a
    context with few of them)."""

    def __init__(self, n_context: int, size: int):
        self.size = int(size)
        self.entries: list[dict[bytes, tuple[float, np.ndarray]]] = [{} for _ in range(n_context)]

    def offer(self, context: int, policy: np.ndarray, score: float) -> None:
        """Keep ``policy`` (copied) for ``context`` if it is among the best ``size`` met so far."""
        kept = self.entries[context]
        key = policy.tobytes()
        if key in kept:
            return
        kept[key] = (float(score), policy.copy())
        if len(kept) > 2 * self.size:
            for drop in sorted(kept, key=lambda k: kept[k][0])[:len(kept) - self.size]:
                del kept[drop]

    def to_list(self) -> list[list[list]]:
        """Per context its kept [score, policy] pairs in the order met (JSON; :meth:`from_list` inverts it)."""
        return [[[score, policy.tolist()] for score, policy in kept.values()] for kept in self.entries]

    @classmethod
    def from_list(cls, data: list[list[list]], size: int) -> "ContextShortlist":
        """The shortlist :meth:`to_list` wrote: the same entries in the same order (ties keep resolving alike)."""
        shortlist = cls(len(data), size)
        for kept, pairs in zip(shortlist.entries, data):
            for score, policy in pairs:
                policy = np.asarray(policy, dtype=np.int64)
                kept[policy.tobytes()] = (float(score), policy)
        return shortlist

    def stacked(self, fill: np.ndarray) -> np.ndarray:
        """(C, size, T, K, N): each context's best first (ties: the first met); a context with fewer
        repeats ``fill[c]`` ((C, T, K, N)) in the empty slots."""
        out = np.repeat(np.asarray(fill)[:, None], self.size, axis=1).copy()
        for c, kept in enumerate(self.entries):
            ranked = sorted(kept.values(), key=lambda entry: -entry[0])[:self.size]
            for slot, (_, policy) in enumerate(ranked):
                out[c, slot] = policy
        return out


class SearchCheckpoint:
    """What :func:`select_searched_references` has finished, kept as JSON at ``path`` after each step
    (:func:`store_in_cache`: a whole file or none), read back when a search starts with the same path.
    ``path`` None keeps nothing."""

    def __init__(self, path: Path | None):
        self.path = path
        self.values: dict[str, Any] = (load_from_cache(path, dict) or {}) if path is not None else {}

    def get(self, key: str) -> Any:
        return self.values.get(key)

    def save(self, **values: Any) -> None:
        self.values.update(values)
        if self.path is not None:
            store_in_cache(self.path, self.values)


def _climb_per_context(sim: CommBatchSimulator, policies: np.ndarray, coordinates: list, episodes: Any,
                       episode_context: np.ndarray, n_context: int, max_sweeps: int, progress: bool,
                       what: str, shortlist: ContextShortlist | None = None) -> np.ndarray:
    """Coordinate ascent of the (C, T, K, N) ``policies``, every context at once (see
    :func:`select_searched_references`). A coordinate (t, k, i) is agent i's action in round t after outcome
    class k of round t - 1 (k None: after every class; i None: the whole joint action, a block move over
    :func:`joint_library`). A context takes a candidate only where it beats the current policy on its own
    episodes (and, for one class, where at least :data:`MIN_CLASS_EPISODES` of them meet that class).
    ``shortlist``, if given, is offered every candidate a context could take.

    Each candidate replays only what it can change: from the state before round t (kept until a round before
    it changes), the episodes that meet class k; every other episode keeps its current reward (episodes are
    independent rows of the batch simulator, so this is the full replay's result)."""
    policies = policies.copy()
    tasks, noise, adversaries = episodes
    rows, library = len(episode_context), joint_library(sim)
    reward = play_policies(sim, policies[episode_context], tasks, noise, adversaries).reward  # (R,) current
    before_round: dict[int, tuple[Any, np.ndarray]] = {}  # t: (state before round t, round t - 1's class)

    def state_before(t: int) -> tuple[Any, np.ndarray]:
        if t not in before_round:
            if t == 0:
                before_round[t] = (sim.initial_state(rows, adversaries), np.zeros(rows, np.int64))
            else:
                state, outcome = state_before(t - 1)
                state = sim.run_round(state, policies[episode_context, t - 1, outcome], tasks, noise)
                before_round[t] = (state, agreement_class(state.previous.label))
        return before_round[t]

    bar = tqdm(total=max_sweeps * len(coordinates), desc=f"search {what} N={sim.n} T={sim.rounds}",
               disable=not progress, file=sys.stderr, unit="coordinate")
    with bar:
        for _ in range(max_sweeps):
            changed = False
            for t, k, i in coordinates:
                prefix, before = state_before(t)
                active = np.arange(rows) if k is None else np.flatnonzero(before == k)
                context = episode_context[active]
                where = (slice(None), t, slice(None) if k is None else k) + ((slice(None),) if i is None else (i,))
                values = library if i is None else np.arange(N_ACTIONS)
                trials = np.repeat(policies[None], len(values), axis=0)
                for trial, value in zip(trials, values):
                    trial[where] = value
                played = np.concatenate([reward[active][None],  # row 0: the current policies
                                         play_trials(sim, prefix.take(active), trials, context, before[active], t,
                                                     tasks.take(active), noise.take(active))])  # (1 + V, active rows)
                sums = np.stack([np.bincount(episode_context, weights=_with(reward, active, p), minlength=n_context)
                                 for p in played])  # summed over every episode in order: as a full replay sums
                allowed = np.ones(n_context, bool) if k is None else (
                    np.bincount(context, minlength=n_context) >= MIN_CLASS_EPISODES)
                if shortlist is not None:
                    _offer_candidates(shortlist, policies, where, values, sums, allowed)
                best = sums[1:].argmax(axis=0)
                better = (sums[1 + best, np.arange(n_context)] > sums[0] + 1e-12) & allowed
                if better.any():
                    for c in np.flatnonzero(better):
                        policies[(c,) + where[1:]] = values[best[c]]
                    moved = better[context]
                    reward[active[moved]] = played[1 + best[context[moved]], np.flatnonzero(moved)]
                    for later in [r for r in before_round if r > t]:
                        del before_round[later]
                    changed = True
                bar.update(1)
            if not changed:
                break
    return policies


def _with(values: np.ndarray, rows: np.ndarray, replaced: np.ndarray) -> np.ndarray:
    """A copy of ``values`` with ``values[rows]`` set to ``replaced``."""
    out = values.copy()
    out[rows] = replaced
    return out


def _offer_candidates(shortlist: ContextShortlist, policies: np.ndarray, where: tuple, values: np.ndarray,
                      sums: np.ndarray, allowed: np.ndarray) -> None:
    """Offer ``shortlist`` each context's ``shortlist.size`` best of one coordinate's trials: ``sums``
    (1 + V, C), row 0 the current ``policies``, row 1 + v the policies with ``where`` set to ``values[v]``;
    a context not ``allowed`` to change this coordinate is offered its current policy only."""
    size = min(shortlist.size, len(sums))
    top = np.argsort(-sums, axis=0, kind="stable")[:size]  # (size, C)
    for c in range(sums.shape[1]):
        for row in (top[:, c] if allowed[c] else (0,)):
            policy = policies[c].copy()
            if row > 0:
                policy[where[1:]] = values[row - 1]
            shortlist.offer(c, policy, sums[row, c])


def measure_headroom(profile_name: str, rounds: int = 2, adversary: str = "none",
                     samples: int = DEFAULT_HEADROOM_SAMPLES, rerank_samples: int = DEFAULT_LARGE_SAMPLES,
                     episodes: int = DEFAULT_LARGE_SAMPLES, seed: int = 0, adversarial_agents: tuple[int, ...] = (),
                     shortlist: int = DEFAULT_SHORTLIST, context_shortlist: int = DEFAULT_CONTEXT_SHORTLIST,
                     target_rule: str = "disagree", progress: bool = True, n_agents: int = ORACLE_AGENTS,
                     chunk_rows: int = DEFAULT_CHUNK_ROWS,
                     context: Callable[[TaskArrays, np.ndarray], np.ndarray] = hidden_context) -> dict[str, Any]:
    """The headroom of the privileged adaptive reference over the best fixed sequence (module docstring).

    ``adversary="random"``: one adversary per episode at a uniformly random position; otherwise
    ``adversarial_agents`` (fixed positions, default none). ``context(tasks, adversaries)`` gives
    the (B, V) int64 context columns the adaptive reference conditions on (default
    :func:`hidden_context`; a study may pass e.g. what a reader of the task text could infer).
    Returns plain Python values: ``profile``, ``best_fixed``, ``adaptive``, ``context_only``,
    ``headroom``, ``headroom_se``, ``context_only_headroom`` (and ``_se``), ``episodes`` (held-out)
    and their accuracies, the best fixed sequence, ``selection`` (the same figures on the
    re-ranking episodes), ``contexts`` (per context: share, rewards, the adaptive policy), the
    settings and ``seconds``.

    For N = 3, T <= 2 the references are enumerated (:func:`select_references`), for other teams searched
    (:func:`select_searched_references`; ``shortlist`` and ``context_shortlist`` do not apply there).

    Raises ValueError naming a bad setting.
    """
    for name, value in (("samples", samples), ("rerank_samples", rerank_samples), ("episodes", episodes),
                        ("shortlist", shortlist), ("context_shortlist", context_shortlist)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"{name}={value!r}: must be an integer >= 1")
    if adversary not in ADVERSARY_SETTINGS:
        raise ValueError(f"adversary={adversary!r}: must be one of {list(ADVERSARY_SETTINGS)}")
    if adversary == "random" and adversarial_agents:
        raise ValueError(f"adversarial_agents={list(adversarial_agents)}: fixed positions cannot be combined "
                         "with adversary='random'")
    started = time.perf_counter()
    random_position = adversary == "random"
    sim = CommBatchSimulator(get_profile(profile_name), n_agents, int(rounds), adversarial_agents=tuple(adversarial_agents),
                         target_rule=target_rule, adversary_position="random" if random_position else "fixed",
                         n_adversaries=1 if random_position else None)
    if exhaustive_feasible(sim):
        references, selection = select_references(sim, seed, samples, rerank_samples, shortlist, context_shortlist,
                                                  progress, chunk_rows, context)
    else:
        references, selection = select_searched_references(sim, seed, samples, rerank_samples, progress, context)

    # Held-out ("eval"): all three on the same episodes.
    held_out = sample_episodes(sim, episodes, seed, "eval")
    played = play_references(sim, references, *held_out, context=context)
    fixed_result, adaptive_result, context_result = (played[k] for k in ("best_fixed", "adaptive", "context_only"))
    diff = adaptive_result.reward - fixed_result.reward
    context_diff = context_result.reward - fixed_result.reward
    held_rows = context(held_out[0], held_out[2])
    contexts = []
    for c, row in enumerate(references.contexts):
        held = (held_rows == row).all(axis=1)
        contexts.append({
            "context": context_description(row, sim.profile.subject_names),
            "share": float(held.mean()),
            "best_fixed": float(fixed_result.reward[held].mean()) if held.any() else None,
            "adaptive": float(adaptive_result.reward[held].mean()) if held.any() else None,
            "selection_episodes": int(selection["context_episodes"][c]),
            "policy": _policy_description(references.adaptive[c], sim),
        })
    return {
        "profile": profile_name,
        "best_fixed": float(fixed_result.reward.mean()),
        "adaptive": float(adaptive_result.reward.mean()),
        "headroom": float(diff.mean()),
        "headroom_se": standard_error(diff),
        "context_only": float(context_result.reward.mean()),
        "context_only_headroom": float(context_diff.mean()),
        "context_only_headroom_se": standard_error(context_diff),
        "episodes": int(episodes),
        "best_fixed_accuracy": float(fixed_result.accuracy.mean()),
        "adaptive_accuracy": float(adaptive_result.accuracy.mean()),
        "best_fixed_sequence": sequence_names(references.fixed),
        "selection": selection["selection"],
        "context_variables": list(CONTEXT_VARIABLES),
        "outcome_classes": outcome_names(sim.n) if sim.rounds >= 2 else [],
        "search": "exhaustive" if exhaustive_feasible(sim) else "coordinate ascent",
        "contexts": contexts,
        "rounds": int(rounds),
        "adversary": adversary,
        "adversarial_agents": [int(i) for i in adversarial_agents],
        "samples": int(samples),
        "rerank_samples": int(rerank_samples),
        "seed": int(seed),
        "seconds": round(time.perf_counter() - started, 2),
    }


def _policy_description(policy: np.ndarray, sim: CommBatchSimulator) -> dict[str, Any]:
    """A (T, K, N) policy in words: round 1's joint action, then per later round the joint action after
    each outcome class of the round before."""
    described: dict[str, Any] = {"first_round": sequence_names(policy[:1, 0])[0]}
    for t in range(1, sim.rounds):
        key = "second_round" if t == 1 else f"round_{t + 1}"
        described[key] = {name: sequence_names(policy[t, k:k + 1])[0] for k, name in enumerate(outcome_names(sim.n))}
    return described


def format_headroom(result: dict[str, Any]) -> str:
    """A readable summary of :func:`measure_headroom`'s result: the three references, then per context."""
    seq = " | ".join(", ".join(r) for r in result["best_fixed_sequence"])
    lines = [f"headroom: profile={result['profile']} rounds={result['rounds']} adversary={result['adversary']} "
             f"adversarial={result['adversarial_agents']} seed={result['seed']} selection={result['samples']}+"
             f"{result['rerank_samples']} held-out={result['episodes']} ({result['seconds']:.1f} s)"]
    rows = [{"reference": "best fixed", "reward": result["best_fixed"], "vs best fixed": "",
             "selection": result["selection"]["best_fixed"], "note": seq},
            {"reference": "context only", "reward": result["context_only"],
             "vs best fixed": f"{result['context_only_headroom']:+.4f} ({result['context_only_headroom_se']:.4f})",
             "selection": result["selection"]["context_only"], "note": "open loop per hidden context"},
            {"reference": "adaptive", "reward": result["adaptive"],
             "vs best fixed": f"{result['headroom']:+.4f} ({result['headroom_se']:.4f})",
             "selection": result["selection"]["adaptive"], "note": "per context, round 2 per round-1 outcome"}]
    lines.append(format_table(rows, ("reference", "reward", "vs best fixed", "selection", "note")))
    ctx_rows = []
    for c in result["contexts"]:
        d = c["context"]
        ctx_rows.append({"subject": d["subject"], "bucket": d["difficulty_bucket"],
                         "adversaries": ",".join(map(str, d["adversaries"])) or "-", "share": c["share"],
                         "best fixed": c["best_fixed"], "adaptive": c["adaptive"],
                         "first round": ", ".join(c["policy"]["first_round"])})
    lines.append(format_table(ctx_rows, ("subject", "bucket", "adversaries", "share", "best fixed", "adaptive",
                                         "first round")))
    lines.append(f"reward (Eq. 12): mean over the {result['episodes']} held-out episodes (common random numbers); "
                 f"headroom = adaptive - best fixed, (paired standard error); selection: on the "
                 f"{result['rerank_samples']} re-ranking episodes the policies were picked on")
    return "\n".join(lines)


# -- the references of a training run -----------------------------------------------------------
REFERENCE_SELECTION = {"samples": DEFAULT_HEADROOM_SAMPLES, "rerank_samples": DEFAULT_LARGE_SAMPLES,
                       "shortlist": DEFAULT_SHORTLIST, "context_shortlist": DEFAULT_CONTEXT_SHORTLIST}
"""The selection sizes of :func:`cached_references` (those of ``python -m topo_env.references.oracle_cli --headroom``)."""
MODEL_SOURCES = ("sim/model.py", "sim/batch.py", "sim/profiles.py", "sim/tasks.py", "frontends/comm_batch.py",
                 "references/headroom.py", "references/oracle.py", "references/search.py")
"""Files (under ``topo_env/``) whose code decides the references: a change to any of them invalidates the cache."""


def env_episodes(env: Any, seeds: Sequence[int], split: str) -> tuple[TaskArrays, EpisodeNoise, np.ndarray]:
    """The tasks, noise and (B, N) bool adversary masks of ``env``'s episodes ``seeds`` of ``split``
    (``env.reset(seed=s, options={"split": split})``, as every evaluation plays them), for the
    batch simulator: with a simulated team, a reference played on them meets the same tasks and
    noise as the env's policies (common random numbers)."""
    tasks, noises = [], []
    adversaries = np.zeros((len(seeds), env.n_agents), dtype=bool)
    for b, seed in enumerate(seeds):
        env.reset(seed=int(seed), options={"split": split})
        tasks.append(env.task)
        noises.append(env.backend.noise)
        adversaries[b, list(env.adversaries)] = True
    return TaskArrays.from_tasks(tasks), EpisodeNoise.concatenate(noises), adversaries


def reference_cache_dir() -> Path:
    """Where :func:`cached_references` keeps its files: ``$TOPOMARL_CACHE_DIR``, else
    ``$XDG_CACHE_HOME/topomarl`` (default ``~/.cache/topomarl``)."""
    explicit = os.environ.get("TOPOMARL_CACHE_DIR")
    if explicit:
        return Path(explicit)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "topomarl"


def references_key(config: EnvConfig, seed: int = 0, context: str = "hidden", selection: dict | None = None) -> str:
    """A digest of everything :func:`cached_references` depends on: the simulated team the config
    builds (its resolved profile, team, roles, adversaries, reward), the selection settings
    (``selection``, default :data:`REFERENCE_SELECTION`) and the code of :data:`MODEL_SOURCES`."""
    env = config.to_dict()
    env["team"] = env["backend"].get("team")
    for key in ("split", "train_tasks", "render_mode", "encoder", "embed_dim", "backend", "reward_mode",
                "disabled_actions"):
        env.pop(key, None)  # what the references do not depend on (they draw their own episodes)
    root = Path(__file__).resolve().parents[1]
    payload = {"env": env, "profile": profile_to_dict(get_profile(config.backend.profile)), "seed": int(seed),
               "selection": selection or REFERENCE_SELECTION, **({"context": context} if context != "hidden" else {}),
               "code": [hashlib.sha256((root / f).read_bytes()).hexdigest() for f in MODEL_SOURCES]}
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:20]


def references_path(config: EnvConfig, seed: int = 0, context: str = "hidden", cache_dir: Path | None = None,
                    selection: dict | None = None) -> Path:
    """Where :func:`cached_references` keeps (or will keep) the references of ``config``'s team."""
    return (cache_dir or reference_cache_dir()) / f"references-{references_key(config, seed, context, selection)}.json"


def search_in_background(config: EnvConfig, seed: int = 0, context: str = "hidden"):
    """Start :func:`cached_references` for ``config``'s team in a second process (a daemon; ``spawn``, so
    nothing of this process's threads is copied) unless the cache already holds them, and return the
    process (None where there is nothing to search). The caller ``join()``s it before it needs them; the
    references are those :func:`cached_references` finds in this process, bit for bit (a search depends
    on its seeds only). A process that fails leaves no file, and the caller's own call searches."""
    import multiprocessing

    if context not in CONTEXTS:
        raise ValueError(f"context={context!r}: must be one of {list(CONTEXTS)}")
    selection = dict(REFERENCE_SELECTION)  # as this process reads it now: the child imports the module afresh
    if references_path(config, seed, context, selection=selection).is_file():
        return None
    process = multiprocessing.get_context("spawn").Process(target=_search_quietly, args=(config, seed, context, selection),
                                                           name=f"topomarl-references-{context}", daemon=True)
    process.start()
    return process


def _search_quietly(config: EnvConfig, seed: int, context: str, selection: dict) -> None:
    cached_references(config, seed, progress=False, context=context, selection=selection)


def cached_references(config: EnvConfig, seed: int = 0, progress: bool = True,
                      cache_dir: Path | None = None, context: str = "hidden",
                      selection: dict | None = None) -> tuple[References, bool]:
    """The headroom references of the simulated team ``config`` builds (enumerated for N = 3, T <= 2, else
    searched), selected as ``python -m topo_env.references.oracle_cli --headroom`` selects them (seed ``seed``),
    from the cache when an
    earlier run computed them (key: :func:`references_key`). ``context="readable"``: the same
    search with what the task text tells (:func:`readable_context`), the teacher of training.
    ``selection``: the search's sizes (default :data:`REFERENCE_SELECTION`). Returns them and whether they
    came from the cache. Raises ValueError for a setting the search does not cover."""
    if context not in CONTEXTS:
        raise ValueError(f"context={context!r}: must be one of {list(CONTEXTS)}")
    selection = selection or REFERENCE_SELECTION
    path = references_path(config, seed, context, cache_dir, selection)
    cached = load_from_cache(path, References.from_dict)
    if cached is not None:
        return cached, True
    sim = CommBatchSimulator.from_config(config)
    chooser = hidden_context if context == "hidden" else readable_context(sim.profile, seed)
    partial = path.with_name(f"{path.stem}.partial.json")  # a searched selection resumes from it
    with one_blas_thread():  # a training run searches two at once, one per core
        if exhaustive_feasible(sim):
            references, _ = select_references(sim, seed=seed, progress=progress, context=chooser, **selection)
        else:
            references, _ = select_searched_references(sim, seed, selection["samples"], selection["rerank_samples"],
                                                       progress, chooser, checkpoint=partial)
    store_in_cache(path, references.to_dict())
    partial.unlink(missing_ok=True)
    return references, False


def load_from_cache(path: Path, parse: Callable[[dict[str, Any]], Any]) -> Any | None:
    """``parse`` of the JSON kept at ``path`` of the cache (:func:`store_in_cache`), or None where there is
    none or it is damaged (the caller computes the result again)."""
    if not path.is_file():
        return None
    try:
        return parse(json.loads(path.read_text()))
    except (ValueError, KeyError, TypeError):
        return None


def store_in_cache(path: Path, data: dict[str, Any]) -> None:
    """Keep ``data`` as JSON at ``path`` of the cache: written beside it under this process's name, then
    renamed over it (processes that find the same result at once each write a whole file). A cache that
    cannot be written is skipped: the next run computes the result again."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data))
        tmp.replace(path)
    except OSError:
        pass
