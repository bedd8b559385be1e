"""The teacher's reading of a task: act on all a reader of the text believes, not on its best guess.

The readable adaptive reference (:func:`~topo_env.references.headroom.cached_references` with
``context="readable"``) holds one closed-loop policy per subject, searched for the subject a
Bayes-optimal reader names from the task's cue words. Played on that single guess (the *MAP
reading*), it loses what misreadings cost: a reader names MMLU-Pro's subject right 88% of the time,
and on the other 12% the policy of the wrong subject plays. Played with the subject known, the same
policies earn more than the hidden-context reference (N = 3, T = 2, seeds 0-2's held-out episodes:
headroom share 1.04 against 0.82 read).

A :class:`PosteriorPolicy` keeps the candidate policies (each read subject's and the best fixed
sequence) and a value table: each candidate's mean reward on simulated episodes of each true subject
and difficulty bucket (stream ``"values"`` of :func:`topo_env.engine.seeding.oracle_rng`, apart from
the search's episodes, so the search's winners are not favoured by their own selection noise). For a
task text it plays the candidate of the highest expected reward under the reader's posterior over
subject and bucket (:meth:`~topo_env.sim.tasks.TextReader.posteriors`): a hedge where the words are
ambiguous, a cheaper or safer policy where the difficulty words suggest one. It reads only the text;
what is privileged is how its table was found (simulated replays), as for the search itself.

    from topo_env.references.reading import cached_posterior_policy
    teacher, cached = cached_posterior_policy(env_config)
    subject_posterior, bucket_posterior = TextReader(profile).posteriors(texts)
    policies = teacher.policies(subject_posterior, bucket_posterior)   # (B, T, K, N)
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from topo_env.engine.seeding import oracle_rng
from topo_env.engine.tasks import DIFFICULTY_BUCKETS
from topo_env.engine.threads import one_blas_thread
from topo_env.frontends.comm_batch import CommBatchSimulator
from topo_env.frontends.env_config import EnvConfig
from topo_env.references import headroom
from topo_env.references.headroom import (
    References, cached_references, load_from_cache, play_policies, readable_rows, reference_cache_dir, references_key,
    store_in_cache,
)

VALUE_EPISODES_PER_RERANK = 2
"""The value table plays twice as many episodes as the search re-ranks on (``rerank_samples`` of
:data:`~topo_env.references.headroom.REFERENCE_SELECTION`: 40,000 by default), each under every candidate
(common random numbers). At N = 3, T = 2 the teacher played on seeds 0-2's held-out episodes earns
about the same share from 40,000 as from 120,000 (1.04, 0.95, 0.91 against 1.03, 0.95, 0.91)."""
VALUE_CHUNK = 10_000
"""Value episodes drawn and played at a time (bounds memory for large teams)."""
READINGS = ("posterior", "map")
"""How a :class:`PosteriorPolicy` reads a text: the expected reward under the whole posterior, or the
policy of the most probable subject alone (the teacher before 2026-11-29)."""


@dataclass(frozen=True)
class PosteriorPolicy:
    """Candidate policies and their values per true subject and difficulty bucket.

    ``candidates`` (C, T, K, N): closed-loop policies as in :class:`~topo_env.references.headroom.References`;
    ``values`` (S, Q, C): candidate c's mean reward on the value episodes of subject s and bucket q
    (a cell without episodes holds the subject's mean over buckets, or the mean over all episodes);
    ``subject_candidate`` (S,): the candidate the readable reference plays for subject s (the MAP reading)."""

    candidates: np.ndarray
    values: np.ndarray
    subject_candidate: np.ndarray

    def choose(self, subject_posterior: np.ndarray, bucket_posterior: np.ndarray,
               reading: str = "posterior") -> np.ndarray:
        """(B,) candidate index per text, given (B, S) subject and (B, Q) bucket posteriors."""
        if reading not in READINGS:
            raise ValueError(f"reading={reading!r}: must be one of {list(READINGS)}")
        subject_posterior, bucket_posterior = np.asarray(subject_posterior), np.asarray(bucket_posterior)
        if reading == "map":
            return self.subject_candidate[subject_posterior.argmax(axis=1)]
        expected = np.einsum("bs,bq,sqc->bc", subject_posterior, bucket_posterior, self.values)
        return expected.argmax(axis=1)

    def policies(self, subject_posterior: np.ndarray, bucket_posterior: np.ndarray,
                 reading: str = "posterior") -> np.ndarray:
        """(B, T, K, N) the policy each text's episode plays (:meth:`choose`)."""
        return self.candidates[self.choose(subject_posterior, bucket_posterior, reading)]

    def to_dict(self) -> dict[str, Any]:
        return {"candidates": self.candidates.tolist(), "values": self.values.tolist(),
                "subject_candidate": self.subject_candidate.tolist()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "PosteriorPolicy":
        candidates = np.asarray(data["candidates"], dtype=np.int64)
        values = np.asarray(data["values"], dtype=np.float64)
        subject_candidate = np.asarray(data["subject_candidate"], dtype=np.int64)
        if candidates.ndim != 4 or values.ndim != 3 or values.shape[2] != len(candidates) \
                or subject_candidate.shape != values.shape[:1] or subject_candidate.max(initial=0) >= len(candidates):
            raise ValueError("a posterior policy of inconsistent shapes")
        return cls(candidates, values, subject_candidate)


def reading_candidates(references: References, sim: CommBatchSimulator) -> tuple[np.ndarray, np.ndarray]:
    """The distinct (C, T, K, N) policies of readable ``references`` (each subject's adaptive policy, and
    the best fixed sequence, which a subject never met in selection plays) and (S,) the index of each
    subject's."""
    subjects = np.arange(len(sim.profile.subjects))
    per_subject = references.policies("adaptive", readable_rows(subjects), sim)
    fixed = references.policies("best_fixed", readable_rows(subjects[:1]), sim)
    candidates, inverse = np.unique(np.concatenate([per_subject, fixed]), axis=0, return_inverse=True)
    return candidates, inverse.reshape(-1)[:len(subjects)]


def value_table(sim: CommBatchSimulator, candidates: np.ndarray, seed: int, episodes: int) -> np.ndarray:
    """(S, Q, C) each candidate's mean reward on ``episodes`` value episodes of ``seed`` per true subject and
    difficulty bucket (:class:`PosteriorPolicy`'s ``values``)."""
    n_subjects, n_buckets = len(sim.profile.subjects), len(DIFFICULTY_BUCKETS)
    sums = np.zeros((n_subjects * n_buckets, len(candidates)))
    counts = np.zeros(n_subjects * n_buckets)
    rng = oracle_rng(seed, "values")
    for start in range(0, int(episodes), VALUE_CHUNK):
        size = min(VALUE_CHUNK, int(episodes) - start)
        tasks, noise = sim.sample(rng, size)
        adversaries = sim.sample_adversaries(rng, size)
        cell = tasks.subject * n_buckets + tasks.bucket
        counts += np.bincount(cell, minlength=len(counts))
        for c, policy in enumerate(candidates):
            played = np.broadcast_to(policy, (size, *policy.shape))
            reward = play_policies(sim, played, tasks, noise, adversaries).reward
            sums[:, c] += np.bincount(cell, weights=reward, minlength=len(counts))
    sums, counts = sums.reshape(n_subjects, n_buckets, -1), counts.reshape(n_subjects, n_buckets)
    overall = sums.sum(axis=(0, 1)) / max(counts.sum(), 1.0)
    subject_mean = np.where(counts.sum(axis=1)[:, None] > 0,
                            sums.sum(axis=1) / np.maximum(counts.sum(axis=1), 1.0)[:, None], overall[None, :])
    return np.where(counts[:, :, None] > 0, sums / np.maximum(counts, 1.0)[:, :, None], subject_mean[:, None, :])


def value_episodes() -> int:
    """The value table's episodes: :data:`VALUE_EPISODES_PER_RERANK` times the search's re-ranking episodes."""
    return VALUE_EPISODES_PER_RERANK * int(headroom.REFERENCE_SELECTION["rerank_samples"])


def posterior_policy(sim: CommBatchSimulator, references: References, seed: int = 0,
                     episodes: int | None = None) -> PosteriorPolicy:
    """The :class:`PosteriorPolicy` of readable ``references`` on ``sim``'s team (its value table on
    ``episodes`` value episodes of ``seed``, default :func:`value_episodes`)."""
    candidates, subject_candidate = reading_candidates(references, sim)
    episodes = value_episodes() if episodes is None else int(episodes)
    return PosteriorPolicy(candidates, value_table(sim, candidates, seed, episodes), subject_candidate)


def posterior_policy_path(config: EnvConfig, seed: int, episodes: int, cache_dir: Path | None = None) -> Path:
    """Where :func:`cached_posterior_policy` keeps the policy of ``config``'s team: keyed by its readable
    references' key, the value episodes and this module's code."""
    payload = {"references": references_key(config, seed, context="readable"), "episodes": int(episodes),
               "code": hashlib.sha256(Path(__file__).read_bytes()).hexdigest()}
    key = hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:20]
    return (cache_dir or reference_cache_dir()) / f"teacher-{key}.json"


def cached_posterior_policy(config: EnvConfig, seed: int = 0, progress: bool = True,
                            cache_dir: Path | None = None) -> tuple[PosteriorPolicy, bool]:
    """The :class:`PosteriorPolicy` of the simulated team ``config`` builds, from its readable references
    (searched or cached: :func:`~topo_env.references.headroom.cached_references`) and a value table of
    :func:`value_episodes` episodes, cached beside them. Returns it and whether both came from the cache."""
    episodes = value_episodes()
    path = posterior_policy_path(config, seed, episodes, cache_dir)
    cached = load_from_cache(path, PosteriorPolicy.from_dict)
    if cached is not None:
        return cached, True
    references, _ = cached_references(config, seed, progress=progress, cache_dir=cache_dir, context="readable")
    with one_blas_thread():  # as the searches: a training run may search the held-out references beside it
        policy = posterior_policy(CommBatchSimulator.from_config(config), references, seed, episodes)
    store_in_cache(path, policy.to_dict())
    return policy, False
