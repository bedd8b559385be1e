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

Answer label 0 is the correct answer and label 1 the task's trap. What a dataset would publish is the
task's ``metadata`` (its subject, its length in tokens, the option letters of a multiple-choice task);
what only the simulator knows (difficulty, latent, bucket, trap, the answer strings by label) is its
``hidden`` part, which traces never hold (:class:`topo_env.engine.tasks.Task`).

:class:`TextReader` is the other side of this process: the subject and difficulty bucket a
Bayes-optimal reader of a task's text infers from its cue words (what any policy reading the text
can know of them at best). Training uses it to build teachers from what is readable.
"""
from __future__ import annotations

import math
import random
import zlib

import numpy as np

from topo_env.sim.profiles import SimProfile
from topo_env.engine.tasks import DIFFICULTY_BUCKETS, Task, difficulty_bucket, draw_task_index

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


class TextReader:
    """What a Bayes-optimal reader of a simulated task's text infers from its cue words.

    Each topic word names the true subject with probability ``subject_cue_fidelity``, else a
    uniformly drawn subject, and is then a uniform word of that subject's vocabulary; difficulty
    words the same with the buckets (:meth:`SimTaskSource.task`). So word w given subject s has
    probability ``f [w in V_s] / |V_s| + (1 - f) / S sum_s' [w in V_s'] / |V_s'|``; the posterior
    multiplies the profile's subject prior (the bucket prior: its Beta difficulty's mass per third)
    by these over the text's words. :meth:`read` gives the most probable subject and bucket,
    :meth:`posteriors` the whole posteriors."""

    def __init__(self, profile: SimProfile):
        from scipy.special import betainc  # the Beta distribution's CDF

        self.profile = profile
        names = profile.subject_names
        self._subjects = self._likelihoods([subject_vocab(n) for n in names], profile.subject_cue_fidelity)
        self._buckets = self._likelihoods(list(CUE_VOCAB), profile.difficulty_cue_fidelity)
        self._subject_prior = np.log(np.asarray(profile.subject_probs, dtype=np.float64))
        cdf = betainc(profile.diff_a, profile.diff_b, np.array([0.0, 1 / 3, 2 / 3, 1.0]))
        self._bucket_prior = np.log(np.maximum(np.diff(cdf), 1e-12))

    @staticmethod
    def _likelihoods(vocabularies: list[tuple[str, ...]], fidelity: float) -> dict[str, np.ndarray]:
        """word -> (K,) log P(word | class k) for K classes with these vocabularies."""
        k = len(vocabularies)
        share = {w: np.zeros(k) for vocab in vocabularies for w in vocab}
        for c, vocab in enumerate(vocabularies):
            for w in vocab:
                share[w][c] += 1.0 / len(vocab)
        return {w: np.log(fidelity * p + (1.0 - fidelity) * p.sum() / k) for w, p in share.items()}

    @staticmethod
    def cue_words(text: str) -> tuple[list[str], list[str]]:
        """The topic words and the difficulty words of a text :meth:`SimTaskSource.task` wrote."""
        topic = text.split("a question about ", 1)[1].split(". It calls for ", 1)
        return topic[0].split(", "), topic[1].split(" work.", 1)[0].split(" and ")

    def read_drawn(self, subjects: np.ndarray, buckets: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """What the reader infers from cue words drawn as :meth:`SimTaskSource.task` draws them for
        tasks of these true ``subjects`` and ``buckets`` ((B,) each): :meth:`read` of texts with the
        same distribution, for task features that have no text (the batch simulator's)."""
        return (self._read_drawn(subjects, self._subjects, self.profile.subject_names, self.profile.subject_cue_words,
                                 self.profile.subject_cue_fidelity, self._subject_prior, rng, subject_vocab),
                self._read_drawn(buckets, self._buckets, range(3), self.profile.difficulty_cue_words,
                                 self.profile.difficulty_cue_fidelity, self._bucket_prior, rng, CUE_VOCAB.__getitem__))

    @staticmethod
    def _read_drawn(true: np.ndarray, likelihoods: dict[str, np.ndarray], classes, words: int, fidelity: float,
                    prior: np.ndarray, rng: np.random.Generator, vocab_of) -> np.ndarray:
        vocabs = [vocab_of(c) for c in classes]
        k = len(vocabs)
        table = [np.stack([likelihoods[w] for w in vocab]) for vocab in vocabs]  # per class: (|V|, K)
        post = np.broadcast_to(prior, (len(true), k)).copy()
        for _ in range(words):
            named = np.where(rng.random(len(true)) < fidelity, true, rng.integers(0, k, len(true)))
            pick = rng.random(len(true))
            for c in range(k):
                rows = np.flatnonzero(named == c)
                word = np.minimum((pick[rows] * len(vocabs[c])).astype(np.int64), len(vocabs[c]) - 1)
                post[rows] += table[c][word]
        return post.argmax(axis=1)

    def read(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """(B,) MAP subject indices and (B,) MAP difficulty buckets of B task texts."""
        subjects, buckets = self._log_posteriors(texts)
        return subjects.argmax(axis=1), buckets.argmax(axis=1)

    def posteriors(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """(B, S) posterior probabilities of the S subjects and (B, 3) of the difficulty buckets, given
        each of B task texts' cue words (the two are independent: a task's difficulty is drawn
        apart from its subject)."""
        probabilities = []
        for log in self._log_posteriors(texts):
            weight = np.exp(log - log.max(axis=1, keepdims=True))
            probabilities.append(weight / weight.sum(axis=1, keepdims=True))
        return probabilities[0], probabilities[1]

    def _log_posteriors(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """(B, S) subject and (B, 3) bucket log posteriors, up to a constant per row."""
        subjects = np.empty((len(texts), len(self._subject_prior)))
        buckets = np.empty((len(texts), len(self._bucket_prior)))
        for b, text in enumerate(texts):
            topic, cues = self.cue_words(text)
            subjects[b] = self._subject_prior + sum(self._subjects[w] for w in topic)
            buckets[b] = self._bucket_prior + sum(self._buckets[w] for w in cues)
        return subjects, buckets


def _answer_strings(domain: str, n_labels: int, rng: random.Random, task_id: str) -> list[str]:
    """Answer strings for labels 0..K; entry 0 is the correct one, entry 1 the trap."""
    if domain == "reasoning":
        return rng.sample(LETTERS[:n_labels], n_labels)
    if domain == "math":
        return [str(v) for v in rng.sample(range(1000), n_labels)]
    digest = zlib.crc32(task_id.encode())
    return [f"impl-{digest:08x}-{k}" for k in range(n_labels)]


class SimTaskSource:
    """Deterministic simulated tasks of one profile: ``task(split, index)`` is always the same.
    ``train_tasks`` K (the env's ``train_tasks``; None: every index): :meth:`sample` draws train
    tasks among indices 0 .. K - 1 only (:func:`~topo_env.engine.tasks.draw_task_index`)."""

    def __init__(self, profile: SimProfile, train_tasks: int | None = None):
        self.profile = profile
        self.train_tasks = train_tasks
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
        answers = _answer_strings(p.domain, p.n_wrong + 1, rng, task_id)
        metadata = {"subject": names[subject], "prompt_tokens": tokens, "profile": p.name}
        if p.domain == "reasoning":  # a multiple-choice dataset publishes its options, in letter order
            metadata["choices"] = tuple(sorted(answers))
        return Task(
            id=task_id,
            domain=p.domain,
            prompt=text,
            reference=answers[0],
            metadata=metadata,
            hidden={
                "difficulty": d,
                "latent": latent,
                "bucket": DIFFICULTY_BUCKETS[bucket],
                "subject_index": subject,
                "trap": answers[1],
                "answers": tuple(answers),
            },
        )

    def sample(self, rng: np.random.Generator, split: str) -> Task:
        return self.task(split, draw_task_index(rng, split, self.train_tasks))
