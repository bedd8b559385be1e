"""A task set for small local models (SmolLM2-135M, Gemma-3-270M): short problems with one exact
integer answer, generated offline and deterministically, in four subjects at three difficulty
levels (``bucket`` 0 easy, 1 medium, 2 hard).

=============  ==================================================  ==============================
subject        what is asked                                       checkable by a code verifier
=============  ==================================================  ==============================
addition       a + b (one-digit; two- plus one-digit; two-digit)   yes
comparison     the larger of two numbers (one, two, three digits)  yes
word_problem   a story of one or two additions / subtractions      yes (once the story is read)
facts          counts everyone knows (legs, days, sides, ...)      no: knowledge, not computation
=============  ==================================================  ==============================

The domain is ``math``: the agents answer as for any math task and are scored with math-verify
against ``reference``; every prompt ends with :data:`ANSWER_REQUEST` and ``metadata["answer_format"]``
is ``"number"``, so a reply without ``\\boxed{}`` or an "answer:" line is read by its last number.
``metadata["verifiable"]`` says whether running code can check the answer (the simulated team's
per-subject verifiability, fitted from a real team's traces, should follow it). The same ``seed`` gives the same tasks, ids and order on every machine: each task draws from
its own generator seeded by (seed, subject, bucket, index).

Load it as ``env.backend.dataset: small_math`` (:func:`agents_llm.tasks.load_dataset`), or write a
JSONL file with ``python -m agents_llm.small_math --out small_math.jsonl``.
"""
from __future__ import annotations

import argparse
import random
import sys
from collections.abc import Sequence
from pathlib import Path

from topo_env.engine.tasks import Task

SUBJECTS: tuple[str, ...] = ("addition", "comparison", "word_problem", "facts")
VERIFIABLE: dict[str, bool] = {"addition": True, "comparison": True, "word_problem": True, "facts": False}
ANSWER_REQUEST = "Answer with a single number."
"""Ends every prompt. With it SmolLM2-135M replies with short sentences that hold the number
(33% right on 60 tasks, 21 completion tokens a reply) instead of ignoring the ``\\boxed{}`` format
(5%); the tasks' ``answer_format: number`` lets the scorer read the last number of such a reply
(:func:`agents_llm.scoring.last_number`)."""
DEFAULT_PER_CELL = 100
"""Tasks per (subject, bucket): 1,200 in all."""

_NAMES = ("Sam", "Mia", "Leo", "Ana", "Tom", "Eva", "Ben", "Zoe")
_THINGS = ("apples", "books", "coins", "stickers", "marbles", "pencils", "cards", "shells")
_FACTS: tuple[tuple[tuple[str, int], ...], ...] = (
    (("How many days are in a week?", 7), ("How many sides does a triangle have?", 3),
     ("How many legs does a dog have?", 4), ("How many wheels does a bicycle have?", 2),
     ("How many sides does a square have?", 4), ("How many eyes does a person have?", 2),
     ("How many legs does a bird have?", 2), ("How many fingers are on one hand?", 5)),
    (("How many months are in a year?", 12), ("How many legs does a spider have?", 8),
     ("How many legs does an insect have?", 6), ("How many hours are in a day?", 24),
     ("How many minutes are in an hour?", 60), ("How many sides does a hexagon have?", 6),
     ("How many seconds are in a minute?", 60), ("How many days are in a year that is not a leap year?", 365)),
    (("How many sides does an octagon have?", 8), ("How many players are on a soccer team on the field?", 11),
     ("How many arms does an octopus have?", 8), ("How many planets are in the solar system?", 8),
     ("How many days are in February in a year that is not a leap year?", 28),
     ("How many sides does a pentagon have?", 5), ("How many keys does a standard piano have?", 88),
     ("How many continents are there on Earth?", 7)),
)


def _addition(rng: random.Random, bucket: int) -> tuple[str, int]:
    ranges = (((1, 9), (1, 9)), ((10, 99), (1, 9)), ((10, 99), (10, 99)))[bucket]
    a, b = (rng.randint(lo, hi) for lo, hi in ranges)
    return f"What is {a} + {b}?", a + b


def _comparison(rng: random.Random, bucket: int) -> tuple[str, int]:
    lo, hi = ((1, 9), (10, 99), (100, 999))[bucket]
    a = rng.randint(lo, hi)
    b = rng.choice([v for v in range(max(lo, a - 9), min(hi, a + 9) + 1) if v != a])  # close numbers
    return f"Which number is larger, {a} or {b}?", max(a, b)


def _word_problem(rng: random.Random, bucket: int) -> tuple[str, int]:
    name, thing = rng.choice(_NAMES), rng.choice(_THINGS)
    a, b = rng.randint(2, 9), rng.randint(1, 9)
    if bucket == 0:
        return f"{name} has {a} {thing}. {name} gets {b} more. How many {thing} does {name} have now?", a + b
    a = a + 9
    if bucket == 1:
        return f"{name} has {a} {thing}. {name} gives away {b}. How many {thing} does {name} have now?", a - b
    c = rng.randint(1, 9)
    return (f"{name} has {a} {thing}. {name} gives away {b} and then finds {c} more. "
            f"How many {thing} does {name} have now?"), a - b + c


def _facts(rng: random.Random, bucket: int) -> tuple[str, int]:
    return rng.choice(_FACTS[bucket])


_MAKERS = {"addition": _addition, "comparison": _comparison, "word_problem": _word_problem, "facts": _facts}


def generate(per_cell: int = DEFAULT_PER_CELL, seed: int = 0, subjects: Sequence[str] = SUBJECTS) -> list[Task]:
    """``per_cell`` tasks of every (subject, bucket), in a fixed order (subject, bucket, index);
    ids ``small_math/<subject>/<bucket>/<index>``."""
    if per_cell < 1:
        raise ValueError(f"per_cell={per_cell}: give at least 1")
    unknown = [s for s in subjects if s not in _MAKERS]
    if unknown:
        raise ValueError(f"unknown subject(s) {unknown}; known: {list(SUBJECTS)}")
    tasks = []
    for s, subject in enumerate(subjects):
        for bucket in range(3):
            for index in range(per_cell):
                rng = random.Random(f"{seed}/{subject}/{bucket}/{index}")  # str seeds hash stably (sha512)
                question, answer = _MAKERS[subject](rng, bucket)
                tasks.append(Task(
                    id=f"small_math/{subject}/{bucket}/{index}", domain="math", prompt=f"{question} {ANSWER_REQUEST}",
                    reference=str(answer),
                    metadata={"subject": subject, "bucket": bucket, "difficulty": (bucket + 0.5) / 3,
                              "verifiable": VERIFIABLE[subject], "answer_format": "number", "source": "small_math"},
                ))
    return tasks


def main(argv: Sequence[str] | None = None) -> int:
    from agents_llm.tasks import save_jsonl

    parser = argparse.ArgumentParser(prog="python -m agents_llm.small_math",
                                     description="Write the small-model task set as a JSONL file.")
    parser.add_argument("--out", required=True, help="JSONL file to write")
    parser.add_argument("--per-cell", type=int, default=DEFAULT_PER_CELL, help="tasks per subject and bucket")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        tasks = generate(args.per_cell, args.seed)
    except ValueError as err:
        parser.error(str(err))
    save_jsonl(tasks, Path(args.out))
    print(f"{len(tasks)} tasks -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
