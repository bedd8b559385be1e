"""Headroom: how much a privileged adaptive controller gains over the best fixed sequence (N=3, T<=2).

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

Everything goes through :class:`~topo_env.sim.batch.BatchSimulator`'s public API and the fields of
:class:`~topo_env.sim.batch.TaskArrays`, so the measurement works unchanged when the model changes;
a model with more hidden variables (e.g. a subject) adds a column in :func:`hidden_context`.
"""
from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from dataclasses import dataclass
from typing import Any

import numpy as np

from topo_env.engine.cli import format_table
from topo_env.references.oracle import (
    DEFAULT_CHUNK_ROWS, DEFAULT_CONTEXT_SHORTLIST, DEFAULT_HEADROOM_SAMPLES, DEFAULT_LARGE_SAMPLES, DEFAULT_SHORTLIST,
    ORACLE_AGENTS, baseline_indices, check_setting, sample_episodes, joint_actions, sequence_actions,
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
    """Episode b plays ``policies[b]`` ((B, 1 + K) as in :func:`policy_candidates`): round 1 the joint
    action ``policies[b, 0]``, round 2 (T = 2) ``policies[b, 1 + k]`` where k is its round-1 outcome."""
    table = joint_actions(sim.n)
    b = len(tasks.difficulty)
    state = sim.run_round(sim.initial_state(b, adversaries), table[policies[:, 0]], tasks, noise)
    if sim.rounds == 2:
        k = agreement_class(state.previous.label)
        state = sim.run_round(state, table[policies[np.arange(b), 1 + k]], tasks, noise)
    return sim.finish(state, tasks, noise)


def rerank_candidates(sim: CommBatchSimulator, candidates: np.ndarray, context: np.ndarray, tasks: TaskArrays,
                      noise: EpisodeNoise, adversaries: np.ndarray) -> np.ndarray:
    """(L, R) reward of candidate slot l on each of the R episodes, where episode r plays its own context's
    candidate ``candidates[context[r], l]`` ((C, L, 1 + K) policies; ``context`` (R,) context ids)."""
    return np.stack([play_policies(sim, candidates[context, slot], tasks, noise, adversaries).reward
                     for slot in range(candidates.shape[1])])


def open_loop_policy(index: int, sim: CommBatchSimulator) -> np.ndarray:
    """The (1 + K,) policy of open-loop sequence ``index`` (the same second round after every outcome)."""
    if sim.rounds == 1:
        return np.array([index], dtype=np.int64)
    first, second = divmod(int(index), len(joint_actions(sim.n)))
    return np.array([first] + [second] * len(outcome_names(sim.n)), dtype=np.int64)


@dataclass(frozen=True)
class References:
    """The headroom references as policies any batch of episodes can play.

    ``fixed_index``: the best fixed open-loop sequence (:func:`topo_env.references.oracle.sequence_actions`'
    index); ``contexts``: (C, V) the context rows seen in selection (columns of the ``context``
    function used, :func:`hidden_context` by default); ``adaptive`` and ``context_only``: (C, 1 + K)
    policies per context row as in :func:`policy_candidates`. A context never seen in selection
    plays the best fixed sequence."""

    fixed_index: int
    contexts: np.ndarray
    adaptive: np.ndarray
    context_only: np.ndarray

    def policies(self, name: str, context_rows: np.ndarray, sim: CommBatchSimulator) -> np.ndarray:
        """(B, 1 + K) policy of reference ``name`` ("best_fixed", "adaptive", "context_only") for
        each row of ``context_rows`` (B, V)."""
        fixed = open_loop_policy(self.fixed_index, sim)
        rows = np.broadcast_to(fixed, (len(context_rows), len(fixed))).copy()
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
        return {"fixed_index": int(self.fixed_index), "contexts": self.contexts.tolist(),
                "adaptive": self.adaptive.tolist(), "context_only": self.context_only.tolist()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "References":
        return cls(int(data["fixed_index"]), *(np.asarray(data[k], dtype=np.int64).reshape(len(data["contexts"]), -1)
                                               for k in ("contexts", "adaptive", "context_only")))


REFERENCE_NAMES = ("best_fixed", "context_only", "adaptive")


def play_references(sim: CommBatchSimulator, references: References, tasks: TaskArrays, noise: EpisodeNoise,
                    adversaries: np.ndarray,
                    context: Callable[[TaskArrays, np.ndarray], np.ndarray] = hidden_context) -> dict[str, BatchResult]:
    """Each reference of :data:`REFERENCE_NAMES` played on the same B episodes (common random numbers)."""
    rows = context(tasks, adversaries)
    return {name: play_policies(sim, references.policies(name, rows, sim), tasks, noise, adversaries)
            for name in REFERENCE_NAMES}


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
    train = sample_episodes(sim, samples, seed, "train")
    rerank = sample_episodes(sim, rerank_samples, seed, "rerank")
    values = [context(tasks, adv) for tasks, _, adv in (train, rerank)]
    known, inverse = np.unique(np.concatenate(values), axis=0, return_inverse=True)
    inverse = inverse.reshape(-1)
    train_ctx, rerank_ctx = inverse[:len(values[0])], inverse[len(values[0]):]
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
    fixed_index = fixed_candidates[int(fixed_rerank.mean(axis=1).argmax())]
    fixed_policy = open_loop_policy(fixed_index, sim)
    # ... and per context the best of its candidates and the best fixed sequence (slot 0).
    candidates = policy_candidates(sums, counts, context_shortlist)
    candidates = np.concatenate([np.broadcast_to(fixed_policy, (n_context, 1, len(fixed_policy))), candidates], axis=1)
    slot_rewards = rerank_candidates(sim, candidates, rerank_ctx, *rerank)
    slot_sums = np.stack([np.bincount(rerank_ctx, weights=r, minlength=n_context) for r in slot_rewards])  # (L, C)
    adaptive_slot = slot_sums.argmax(axis=0)  # (C,)
    context_slot = slot_sums[:1 + min(context_shortlist, n_first)].argmax(axis=0)  # slot 0 and the open-loop ones
    references = References(int(fixed_index), known.astype(np.int64),
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

    Raises ValueError naming a bad setting.
    """
    check_setting(n_agents, rounds)
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
    references, selection = select_references(sim, seed, samples, rerank_samples, shortlist, context_shortlist,
                                              progress, chunk_rows, context)

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
        "best_fixed_sequence": sequence_names(sequence_actions(references.fixed_index, sim.rounds, sim.n)),
        "selection": selection["selection"],
        "context_variables": list(CONTEXT_VARIABLES),
        "outcome_classes": outcome_names(sim.n) if sim.rounds == 2 else [],
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
    table = joint_actions(sim.n)
    described: dict[str, Any] = {"first_round": sequence_names(table[policy[:1]])[0]}
    if sim.rounds == 2:
        described["second_round"] = {name: sequence_names(table[policy[1 + k: 2 + k]])[0]
                                     for k, name in enumerate(outcome_names(sim.n))}
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
                 "references/headroom.py", "references/oracle.py")
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


def references_key(config: EnvConfig, seed: int = 0, context: str = "hidden") -> str:
    """A digest of everything :func:`cached_references` depends on: the simulated team the config
    builds (its resolved profile, team, roles, adversaries, reward), the selection settings and
    the code of :data:`MODEL_SOURCES`."""
    env = config.to_dict()
    env["team"] = env["backend"].get("team")
    for key in ("split", "render_mode", "encoder", "embed_dim", "backend", "reward_mode", "disabled_actions"):
        env.pop(key, None)  # what the simulated team does not depend on
    root = Path(__file__).resolve().parents[1]
    payload = {"env": env, "profile": profile_to_dict(get_profile(config.backend.profile)), "seed": int(seed),
               "selection": REFERENCE_SELECTION, **({"context": context} if context != "hidden" else {}),
               "code": [hashlib.sha256((root / f).read_bytes()).hexdigest() for f in MODEL_SOURCES]}
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:20]


def cached_references(config: EnvConfig, seed: int = 0, progress: bool = True,
                      cache_dir: Path | None = None, context: str = "hidden") -> tuple[References, bool]:
    """The headroom references of the simulated team ``config`` builds (N = 3, T <= 2), selected as
    ``python -m topo_env.references.oracle_cli --headroom`` selects them (seed ``seed``), from the cache when an
    earlier run computed them (key: :func:`references_key`). ``context="readable"``: the same
    search with what the task text tells (:func:`readable_context`), the teacher of training.
    Returns them and whether they came from the cache. Raises ValueError for a setting the search
    does not cover."""
    check_setting(config.n_agents, config.rounds)
    if context not in CONTEXTS:
        raise ValueError(f"context={context!r}: must be one of {list(CONTEXTS)}")
    directory = cache_dir or reference_cache_dir()
    path = directory / f"references-{references_key(config, seed, context)}.json"
    if path.is_file():
        try:
            return References.from_dict(json.loads(path.read_text())), True
        except (ValueError, KeyError, TypeError):
            pass  # a damaged file: recompute it
    sim = CommBatchSimulator.from_config(config)
    chooser = hidden_context if context == "hidden" else readable_context(sim.profile, seed)
    references, _ = select_references(sim, seed=seed, progress=progress, context=chooser, **REFERENCE_SELECTION)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(references.to_dict()))
        tmp.replace(path)
    except OSError:
        pass  # no writable cache: the next run recomputes them
    return references, False
