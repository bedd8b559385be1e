"""Hugging Face ``datasets`` loaders: public benchmarks -> ``list[topo_env.engine.tasks.Task]``.

:func:`load_benchmark` maps each benchmark's published record schema to :class:`Task`:

* ``mmlu_pro``: ``TIGER-Lab/MMLU-Pro`` (split ``test``) -> reasoning; fields question_id,
  question, options, answer (letter); optional answer_index (checked), category, src.
* ``aime24``: ``Maxwell-Jia/AIME_2024`` (``train``) -> math; ID, Problem, Answer; optional Solution.
* ``aime25``: ``MathArena/aime_2025`` (``train``) -> math; problem_idx, problem, answer.
* ``hmmt25``: ``MathArena/hmmt_feb_2025`` (``train``) -> math; problem_idx, problem, answer.
* ``beyond_aime``: ``ByteDance-Seed/BeyondAIME`` (``test``) -> math; problem, answer (no id
  field: the id is the record index).
* ``livecodebench``: ``livecodebench/code_generation_lite`` (``test``) -> code; question_id,
  question_content, public_test_cases; optional question_title, platform, contest_id,
  contest_date, starter_code, difficulty, private_test_cases, metadata.

Schema provenance: the MMLU-Pro, MathArena (``problem_idx``/``problem``/``answer``, split
``train``) and Maxwell-Jia AIME 2024 (``ID``/``Problem``/``Solution``/``Answer``, split
``train``) field names were checked against the dataset cards on the Hub. The BeyondAIME
field names (``problem``, ``answer``) and its ``test`` split, and the LiveCodeBench field
names, come from the task brief and third-party loaders; they were **not** checked against
the Hub cards. A wrong field name fails loudly (``ValueError`` naming the field).

Task ids are ``"<name>/<record id>"`` (e.g. ``"aime24/2024-I-1"``, ``"mmlu_pro/70"``).
Math references are ``str(answer)`` (an integer-valued float is written as an int).

MMLU-Pro: ``reference`` is the answer letter, ``metadata["choices"]`` the option texts,
``metadata["question"]`` the bare question, and the prompt is the question followed by
the lettered options (:func:`agents_llm.tasks.format_choices`), the same layout as
:func:`agents_llm.tasks.load_jsonl` uses for multiple choice.

LiveCodeBench
-------------
``prompt`` is ``question_content``, followed by the starter code in a python fence when
there is any. ``tests`` is a self-contained Python **harness program**: the test cases
(``public_test_cases`` is a JSON string: a list of ``{"input", "output", "testtype"}``) as one
data line, then the text of :mod:`agents_llm.lcb_harness` (which starts
:mod:`agents_llm.lcb_functional_worker` for functional cases). It follows LiveCodeBench's own
runner (``lcb_runner/evaluation/testing_util.py``), stops at the first failing case, prints one
line per passed case and the failure (on stderr), and exits 0 only when every case passes:

* ``testtype == "stdin"``: the candidate program is run in a child process (the current
  interpreter) with ``input`` on stdin; it passes when its stdout equals ``output`` after
  stripping the whole text and each line (LiveCodeBench's own comparison also strips lines).
* ``testtype == "functional"`` (LeetCode style, ``grade_call_based``): the problem's JSON
  ``metadata`` names the function (``func_name``; a record with functional cases and no
  ``func_name`` is an error). One worker process per task runs LiveCodeBench's import
  prelude (``from typing import *``, ``from collections import *``, ... and
  ``sys.setrecursionlimit(50000)``, so ``List[int]`` hints work without imports) and then the
  candidate in a module named ``tmp_sol`` (so an ``if __name__ == "__main__":`` block does not
  run). The callable is ``Solution().<func_name>`` when the candidate's source contains
  ``class Solution`` (LiveCodeBench's test; one instance serves every case), else the
  top-level function ``<func_name>``. Each case's ``input`` is split at newlines and every
  line parsed with ``json.loads`` (the positional arguments); ``output`` is ``json.loads``-ed.
  A returned tuple is turned into a list (only at the top level), then the case passes when
  ``prediction == expected``: exact equality, no float tolerance, as in LiveCodeBench. Loading
  the candidate and each call get :data:`PER_CASE_TIMEOUT_S` seconds of wall time (the
  harness kills the worker when one runs over); an exception (``SystemExit`` included) or a
  dead worker fails the case. The JSON of every case is checked when the task is loaded
  (``ValueError`` naming the field and case otherwise).
* A problem with both kinds runs its stdin cases, then its functional cases; any other
  ``testtype`` is an error. A problem with no case at all gets a harness that prints
  ``UNSUPPORTED`` and exits 2, and ``metadata["tests_supported"] = False``.
* ``private_test_cases`` are added to the harness only when they are plain JSON in the same
  format. In the published dataset they are usually base64 + zlib + **pickle**: those are
  never decoded (unpickling untrusted data runs code); ``metadata["private_tests"]`` says
  ``"included"``, ``"encoded (not decoded: unsupported)"`` or ``"absent"``.

Metadata: ``test_harness = "livecodebench"``, ``n_tests`` (= ``n_stdin_tests`` +
``n_functional_tests``), ``tests_supported``, ``per_case_timeout_s``, ``private_tests``, and
the record's own ``metadata`` JSON as ``lcb_metadata``.

The harness needs the candidate source as a global string ``CANDIDATE_SOURCE`` defined
*before* it; :func:`agents_llm.scoring.build_test_program` makes that program (completion with markdown
fences stripped, then the harness) and :func:`agents_llm.scoring.score_code` runs it in
:func:`agents_llm.sandbox.execute` for tasks with this ``test_harness``. Give the sandbox a
timeout of at least ``(n_tests + 1) x PER_CASE_TIMEOUT_S`` if slow but correct candidates
must pass. Exposure (the same as in LiveCodeBench's runner, which calls the candidate in the
process that holds the expected outputs): the harness and the functional worker hold the
expected outputs in memory and the candidate runs in the same sandbox, so a candidate written
to cheat could find them. The harness guards against accidents: the candidate only ever runs
in child processes, so its ``sys.exit(0)``, ``os._exit`` or prints cannot end the harness
with a pass.

Loading from the Hub: recent ``datasets`` releases (4.0+) no longer run dataset loading
scripts; ``livecodebench/code_generation_lite`` was published with one (``version_tag=``).
If ``load_benchmark("livecodebench")`` fails for that reason, download one of its
``test*.jsonl`` files and pass it with ``data_files=``.

Nothing here touches the network at import time; ``datasets`` is imported lazily.
"""
from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from agents_llm.tasks import choice_letters, format_choices
from topo_env.engine.tasks import Task

__all__ = ["BENCHMARKS", "load_benchmark", "PER_CASE_TIMEOUT_S"]

PER_CASE_TIMEOUT_S = 6.0
"""Wall-clock limit (seconds) of one LiveCodeBench test case inside the harness, and of loading
the candidate for functional cases (LiveCodeBench uses 6 s for both)."""

_MISSING = object()


class _RecordError(ValueError):
    pass


def _get(rec: Mapping[str, Any], field: str, required: bool = True) -> Any:
    """A record field; missing or ``None`` (``datasets`` fills absent JSON keys with None)
    is an error when ``required``."""
    value = rec.get(field, _MISSING) if isinstance(rec, Mapping) else _MISSING
    if value is _MISSING or value is None:
        if required:
            raise _RecordError(f"missing field {field!r}")
        return None
    return value


def _text(rec: Mapping[str, Any], field: str) -> str:
    value = _get(rec, field)
    if not isinstance(value, str) or not value.strip():
        raise _RecordError(f"field {field!r} must be a non-empty string, got {value!r}")
    return value


def _answer_str(rec: Mapping[str, Any], field: str) -> str:
    value = _get(rec, field)
    if isinstance(value, bool):
        raise _RecordError(f"field {field!r} must be a string or a number, got {value!r}")
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, (str, int, float)):
        raise _RecordError(f"field {field!r} must be a string or a number, got {type(value).__name__}")
    text = str(value).strip()
    if not text:
        raise _RecordError(f"field {field!r} must not be empty")
    return text


# --------------------------------------------------------------------------- converters
def _mmlu_pro(rec: Mapping[str, Any], index: int) -> Task:
    qid = _get(rec, "question_id")
    question = _text(rec, "question")
    options = _get(rec, "options")
    if not isinstance(options, (list, tuple)) or not 2 <= len(options) <= 26:
        raise _RecordError(f"field 'options' must be a list of 2 to 26 strings, got {options!r}")
    options = [str(o) for o in options]
    letters = choice_letters(len(options))
    answer = str(_get(rec, "answer")).strip().upper()
    if answer not in letters:
        raise _RecordError(f"field 'answer' must be one of {letters[0]}-{letters[-1]}, got {answer!r}")
    answer_index = _get(rec, "answer_index", required=False)
    if answer_index is not None and answer_index != letters.index(answer):
        raise _RecordError(f"field 'answer_index' ({answer_index}) disagrees with 'answer' ({answer!r})")
    metadata: dict[str, Any] = {"source": "mmlu_pro", "question": question, "choices": options}
    for key in ("category", "src"):
        value = _get(rec, key, required=False)
        if value is not None:
            metadata[key] = value
    prompt = question.rstrip() + "\n\n" + format_choices(options)
    return Task(id=f"mmlu_pro/{qid}", domain="reasoning", prompt=prompt, reference=answer, metadata=metadata)


def _math(name: str, id_field: str | None, problem_field: str, answer_field: str,
          extra: tuple[str, ...] = ()) -> Callable[[Mapping[str, Any], int], Task]:
    def convert(rec: Mapping[str, Any], index: int) -> Task:
        rid = _get(rec, id_field) if id_field else index
        problem = _text(rec, problem_field)
        reference = _answer_str(rec, answer_field)
        metadata: dict[str, Any] = {"source": name}
        for key in extra:
            value = _get(rec, key, required=False)
            if value is not None:
                metadata[key.lower()] = value
        return Task(id=f"{name}/{rid}", domain="math", prompt=problem, reference=reference, metadata=metadata)

    return convert


_TESTTYPES = ("stdin", "functional")


def _parse_cases(raw: Any, field: str) -> list[dict[str, Any]]:
    """The test cases of ``field`` (a JSON string or an already decoded list), checked: each
    has string ``input``/``output`` and a known ``testtype``; a functional case's input lines
    and output must be JSON (as LiveCodeBench parses them)."""
    cases = json.loads(raw) if isinstance(raw, str) else raw
    if not isinstance(cases, list):
        raise _RecordError(f"field {field!r} must be a JSON list of test cases")
    for i, case in enumerate(cases):
        if not isinstance(case, Mapping) or not all(k in case for k in ("input", "output", "testtype")):
            raise _RecordError(f"field {field!r}: case {i} needs 'input', 'output' and 'testtype'")
        if not isinstance(case["input"], str) or not isinstance(case["output"], str):
            raise _RecordError(f"field {field!r}: case {i}: 'input' and 'output' must be strings")
        if case["testtype"] not in _TESTTYPES:
            raise _RecordError(f"field {field!r}: case {i}: unknown testtype {case['testtype']!r} "
                               f"(expected one of {', '.join(_TESTTYPES)})")
        if case["testtype"] == "functional":
            for j, line in enumerate(case["input"].split("\n")):
                try:
                    json.loads(line)
                except json.JSONDecodeError as e:
                    raise _RecordError(f"field {field!r}: case {i}: functional input line {j} is not "
                                       f"JSON ({e}): {line[:100]!r}") from None
            try:
                json.loads(case["output"])
            except json.JSONDecodeError as e:
                raise _RecordError(f"field {field!r}: case {i}: functional output is not JSON ({e}): "
                                   f"{case['output'][:100]!r}") from None
    return [dict(c) for c in cases]


# LiveCodeBench's call-based prelude (testing_util.import_string), in this order: star imports
# (later ones shadow earlier ones; ``builtins`` restores e.g. ``open`` after ``io``), then the
# modules themselves, then a high recursion limit.
_PRELUDE_STAR_MODULES = ("string", "re", "datetime", "collections", "heapq", "bisect", "copy", "math",
                         "random", "statistics", "itertools", "functools", "operator", "io", "sys",
                         "json", "builtins", "typing")
_PRELUDE_MODULES = ("string", "re", "datetime", "collections", "heapq", "bisect", "copy", "math", "random",
                    "statistics", "itertools", "functools", "operator", "io", "sys", "json")
_CALL_PRELUDE = ("".join(f"from {m} import *\n" for m in _PRELUDE_STAR_MODULES)
                 + "".join(f"import {m}\n" for m in _PRELUDE_MODULES)
                 + "sys.setrecursionlimit(50000)\n")


@functools.lru_cache(maxsize=None)
def _module_text(filename: str) -> str:
    """The text of a module of this package that runs inside the sandbox, where no installed package is sure to
    be importable: :mod:`agents_llm.lcb_harness` and :mod:`agents_llm.lcb_functional_worker`."""
    return Path(__file__).with_name(filename).read_text(encoding="utf-8")


def _harness(stdin_cases: list[tuple[int, str, str]], functional_cases: list[tuple[int, str, str]],
             func_name: str | None) -> str:
    """The harness program (needs ``CANDIDATE_SOURCE`` defined before it): one data line, ``HARNESS_CONFIG``,
    then the text of :mod:`agents_llm.lcb_harness`. Cases are ``(index in the task's case list, input, output)``."""
    config = {"stdin_cases": stdin_cases, "functional_cases": functional_cases, "func_name": func_name,
              "per_case_timeout_s": PER_CASE_TIMEOUT_S, "call_prelude": _CALL_PRELUDE,
              "worker_source": _module_text("lcb_functional_worker.py") if functional_cases else None}
    return ("\n# ---- LiveCodeBench test harness (agents_llm/lcb_harness.py, made by agents_llm.hf_loaders) ----\n"
            f"HARNESS_CONFIG = {config!r}\n" + _module_text("lcb_harness.py"))


def _livecodebench(rec: Mapping[str, Any], index: int) -> Task:
    qid = _get(rec, "question_id")
    content = _text(rec, "question_content")
    public = _parse_cases(_get(rec, "public_test_cases"), "public_test_cases")

    private_status = "absent"
    private: list[dict[str, Any]] = []
    raw_private = _get(rec, "private_test_cases", required=False)
    if raw_private not in (None, "", []):
        try:
            decoded = json.loads(raw_private) if isinstance(raw_private, str) else raw_private
        except json.JSONDecodeError:  # base64/zlib/pickle blob: never decoded
            private_status = "encoded (not decoded: unsupported)"
        else:
            private = _parse_cases(decoded, "private_test_cases")
            private_status = "included"

    meta_raw = _get(rec, "metadata", required=False)
    if isinstance(meta_raw, str):
        try:
            meta_raw = json.loads(meta_raw) if meta_raw.strip() else {}
        except json.JSONDecodeError:
            pass

    cases = public + private
    stdin_cases = [(i, c["input"], c["output"]) for i, c in enumerate(cases) if c["testtype"] == "stdin"]
    functional_cases = [(i, c["input"], c["output"]) for i, c in enumerate(cases) if c["testtype"] == "functional"]
    func_name = meta_raw.get("func_name") if isinstance(meta_raw, Mapping) else None
    if functional_cases and (not isinstance(func_name, str) or not func_name.isidentifier()):
        raise _RecordError(f"field 'metadata' must name the function of the functional test cases "
                           f"(\"func_name\": an identifier), got {meta_raw!r}")
    tests = _harness(stdin_cases, functional_cases, func_name if functional_cases else None)

    starter = _get(rec, "starter_code", required=False)
    prompt = content.rstrip()
    if isinstance(starter, str) and starter.strip():
        prompt += "\n\n```python\n" + starter.strip("\n") + "\n```"

    metadata: dict[str, Any] = {
        "source": "livecodebench",
        "test_harness": "livecodebench",
        "tests_supported": bool(cases),
        "n_tests": len(cases),
        "n_stdin_tests": len(stdin_cases),
        "n_functional_tests": len(functional_cases),
        "per_case_timeout_s": PER_CASE_TIMEOUT_S,
        "private_tests": private_status,
    }
    for key in ("question_title", "platform", "contest_id", "contest_date", "difficulty"):
        value = _get(rec, key, required=False)
        if value is not None:
            metadata[key] = value if isinstance(value, (str, int, float)) else str(value)
    if starter:
        metadata["starter_code"] = starter
    if meta_raw:
        metadata["lcb_metadata"] = meta_raw
    return Task(id=f"livecodebench/{qid}", domain="code", prompt=prompt, reference=None, tests=tests,
                metadata=metadata)


# --------------------------------------------------------------------------- registry
BENCHMARKS: dict[str, tuple[str, str, Callable[[Mapping[str, Any], int], Task]]] = {
    "mmlu_pro": ("TIGER-Lab/MMLU-Pro", "test", _mmlu_pro),
    "aime24": ("Maxwell-Jia/AIME_2024", "train", _math("aime24", "ID", "Problem", "Answer", ("Solution",))),
    "aime25": ("MathArena/aime_2025", "train", _math("aime25", "problem_idx", "problem", "answer")),
    "hmmt25": ("MathArena/hmmt_feb_2025", "train", _math("hmmt25", "problem_idx", "problem", "answer")),
    "beyond_aime": ("ByteDance-Seed/BeyondAIME", "test", _math("beyond_aime", None, "problem", "answer")),
    "livecodebench": ("livecodebench/code_generation_lite", "test", _livecodebench),
}
"""name -> (Hub id, default split, record converter)."""


def load_benchmark(name: str, split: str | None = None, limit: int | None = None,
                   data_files: str | None = None) -> list[Task]:
    """Load benchmark ``name`` (a key of :data:`BENCHMARKS`) as tasks; see the module docstring.

    Without ``data_files`` it calls ``datasets.load_dataset(<hub id>, split=split or the
    benchmark's default split)`` (network, or the local HF cache). With ``data_files`` (a
    local JSON/JSONL path or glob in the benchmark's own record schema) it calls
    ``datasets.load_dataset("json", data_files=data_files, split="train")`` and ignores
    ``split``. ``limit`` keeps the first ``limit`` records.

    Raises ``ValueError`` for an unknown name, a negative limit, or a record with a missing
    or malformed field (naming the benchmark, the record index and the field), and
    ``ImportError`` when ``datasets`` is not installed.
    """
    if name not in BENCHMARKS:
        raise ValueError(f"unknown benchmark {name!r}; known benchmarks: {', '.join(sorted(BENCHMARKS))}")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise ValueError(f"limit must be a non-negative int, got {limit!r}")
    hub_id, default_split, convert = BENCHMARKS[name]
    try:
        import datasets
    except ImportError as e:
        raise ImportError("load_benchmark needs the Hugging Face 'datasets' package: pip install datasets") from e

    if data_files is not None:
        ds = datasets.load_dataset("json", data_files=data_files, split="train")
    else:
        ds = datasets.load_dataset(hub_id, split=split or default_split)
    if limit is not None:
        ds = ds.select(range(min(limit, len(ds))))

    tasks: list[Task] = []
    seen: dict[str, int] = {}
    for index, rec in enumerate(ds):
        try:
            task = convert(rec, index)
        except _RecordError as e:
            raise ValueError(f"{name}: record {index}: {e}") from None
        except (ValueError, TypeError) as e:  # e.g. invalid JSON in public_test_cases
            raise ValueError(f"{name}: record {index}: {type(e).__name__}: {e}") from None
        if task.id in seen:
            raise ValueError(f"{name}: record {index}: duplicate id {task.id!r} (first at record {seen[task.id]})")
        seen[task.id] = index
        tasks.append(task)
    return tasks

