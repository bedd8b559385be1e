"""Simulated tasks: a subject, a difficulty, a trap, a prompt length and a text with noisy cues.

Real problem statements tell a reader what they are about and, much less reliably, how hard they
are; simulated ones do too. The text of a task holds ``subject_cue_words`` topic words, each from the
vocabulary of the task's true subject with probability ``subject_cue_fidelity`` and from a random
subject otherwise, and ``difficulty_cue_words`` difficulty words, each from the true difficulty
bucket's vocabulary with probability ``difficulty_cue_fidelity`` and from a random bucket otherwise.

Fidelities (defaults in :class:`topo_env.sim.profiles.SimProfile`): with 3 topic words at 0.7 a
majority-word reader names MMLU-Pro's subject about 90% of the time, about what a text classifier
reads from a real question (MMLU-Pro's categories are course subjects with distinctive vocabulary);
with 4 difficulty words at 0.3 a reader names the difficulty bucket about 45% of the time (chance
33%): item difficulty is only weakly predictable from question text. A learned controller can only
earn what these cues let it see.

Answer label 0 is the correct answer and label 1 the task's trap (``metadata["trap"]``).
"""
from __future__ import annotations

import math
import random
import zlib

import numpy as np

from topo_env.sim.profiles import SimProfile
from topo_env.tasks import DIFFICULTY_BUCKETS, Task, difficulty_bucket

SPLITS: dict[str, int] = {"train": 0, "eval": 1}

CUE_VOCAB: tuple[tuple[str, ...], ...] = (
    ("basic", "routine", "direct", "simple", "standard", "familiar", "short", "elementary"),
    ("moderate", "multi-step", "careful", "combined", "several", "intermediate", "layered", "applied"),
    ("intricate", "olympiad", "subtle", "deep", "nonstandard", "tricky", "novel", "demanding"),
)
SUBJECT_VOCAB: dict[str, tuple[str, ...]] = {
    "math": ("equation", "integral", "matrix", "derivative"),
    "physics": ("velocity", "momentum", "circuit", "photon"),
    "chemistry": ("molecule", "reaction", "molar", "oxidation"),
    "law": ("plaintiff", "statute", "contract", "tort"),
    "engineering": ("beam", "turbine", "voltage", "load"),
    "other": ("trivia", "practice", "custom", "general"),
    "economics": ("inflation", "demand", "tariff", "monetary"),
    "health": ("patient", "symptom", "dosage", "diagnosis"),
    "psychology": ("behavior", "cognitive", "stimulus", "memory"),
    "business": ("revenue", "accounting", "marketing", "interest"),
    "biology": ("cell", "enzyme", "gene", "species"),
    "philosophy": ("ethics", "argument", "Kant", "virtue"),
    "computer science": ("algorithm", "compiler", "pointer", "complexity"),
    "history": ("empire", "treaty", "century", "revolution"),
    "algebra": ("polynomial", "roots", "inequality", "function"),
    "combinatorics": ("arrangements", "choose", "paths", "subsets"),
    "geometry": ("triangle", "circle", "angle", "tangent"),
    "number theory": ("modulo", "divisor", "prime", "remainder"),
    "algebra and number theory": ("polynomial", "modulo", "divisor", "roots"),
    "string manipulation": ("string", "substring", "characters", "vowels"),
    "list processing": ("list", "sorted", "elements", "filter"),
    "arithmetic": ("integer", "digits", "sum", "factorial"),
    "control logic": ("condition", "boolean", "nested", "case"),
    "leetcode functional": ("class", "method", "array", "return"),
    "atcoder stdin": ("input", "grid", "queries", "print"),
    "codeforces stdin": ("testcases", "permutation", "tree", "output"),
}
LETTERS = "ABCDEFGHIJ"


def subject_vocab(subject: str) -> tuple[str, ...]:
    """Topic words of ``subject`` (a subject outside :data:`SUBJECT_VOCAB`: the words of its name)."""
    return SUBJECT_VOCAB.get(subject) or tuple(subject.split())


def _answer_strings(domain: str, n_labels: int, rng: random.Random, task_id: str) -> list[str]:
    """Answer strings for labels 0..K; entry 0 is the correct one, entry 1 the trap."""
    if domain == "reasoning":
        return rng.sample(LETTERS[:n_labels], n_labels)
    if domain == "math":
        return [str(v) for v in rng.sample(range(1000), n_labels)]
    digest = zlib.crc32(task_id.encode())
    return [f"impl-{digest:08x}-{k}" for k in range(n_labels)]


class SimTaskSource:
    """Deterministic simulated tasks of one profile: ``task(split, index)`` is always the same."""

    def __init__(self, profile: SimProfile):
        self.profile = profile
        self._subject_cdf = np.cumsum(profile.subject_probs).tolist()
        self._subject_cdf[-1] = 1.0

    def task(self, split: str, index: int) -> Task:
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r}; known splits: {sorted(SPLITS)}")
        p = self.profile
        # Python's Random: seeded from a string, it is the same in every process, and it is
        # ~10x cheaper to create than a numpy Generator (one per task, at every env reset).
        tasks_of = p.task_set or p.name
        rng = random.Random(f"{tasks_of}/{split}/{int(index)}")
        d = rng.betavariate(p.diff_a, p.diff_b)
        latent, z_tokens = rng.gauss(0.0, 1.0), rng.gauss(0.0, 1.0)
        u = rng.random()
        subject = next(k for k, c in enumerate(self._subject_cdf) if u < c or k == len(self._subject_cdf) - 1)
        bucket = difficulty_bucket(d)
        tokens = math.floor(p.task_tokens_mean * (0.7 + 0.6 * d) * math.exp(0.2 * z_tokens) + 0.5)
        names = p.subject_names
        topic = []
        for _ in range(p.subject_cue_words):
            s = subject if rng.random() < p.subject_cue_fidelity else rng.randrange(len(names))
            topic.append(rng.choice(subject_vocab(names[s])))
        cues = []
        for _ in range(p.difficulty_cue_words):
            b = bucket if rng.random() < p.difficulty_cue_fidelity else rng.randrange(3)
            cues.append(rng.choice(CUE_VOCAB[b]))
        task_id = f"{tasks_of}-{split}-{int(index)}"
        text = (f"[{tasks_of}] Problem: a question about {', '.join(topic)}. "
                f"It calls for {' and '.join(cues)} work. Give your final answer.")
        choices = _answer_strings(p.domain, p.n_wrong + 1, rng, task_id)
        return Task(
            id=task_id,
            domain=p.domain,
            prompt=text,
            reference=choices[0],
            metadata={
                "difficulty": d,
                "latent": latent,
                "bucket": DIFFICULTY_BUCKETS[bucket],
                "subject": names[subject],
                "subject_index": subject,
                "trap": choices[1],
                "prompt_tokens": tokens,
                "choices": tuple(choices),
                "profile": p.name,
            },
        )

    def sample(self, rng: np.random.Generator, split: str) -> Task:
        return self.task(split, int(rng.integers(2**31 - 1)))
