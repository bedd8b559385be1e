"""Scorers of the real LLM teams: multiple choice, math (math-verify + timeout), code (sandbox)."""
from __future__ import annotations

import io
import json
import threading
import time

import pytest

from agents_llm import math_verify_worker, scoring
from agents_llm.scoring import (
    build_program,
    extract_choice,
    extract_math_answer,
    score,
    score_code,
    score_math,
    score_multiple_choice,
    strip_code_fences,
)
from topo_env.engine.tasks import Task


def needs_math_verify(test):
    """Marks tests that exercise math-verify itself (a required dependency)."""
    return test


def _sandbox():
    import agents_llm.sandbox

    return agents_llm.sandbox


# =========================================================================== multiple choice
@pytest.mark.parametrize(
    "text, expected",
    [
        ("Answer: C", "C"),
        ("the answer is (B)", "B"),
        ("After weighing everything, I'm confident: **D**", "D"),
        ("Final answer: E", "E"),
        ("So we get $\\boxed{C}$.", "C"),
        ("\\boxed{\\text{B}}", "B"),
        ("I think A careful reading of the passage settles it.", None),
        ("The answer is B. However, the second clause fails. Actually, the answer is D.", "D"),
        ("The answer is A because the premise holds.", "A"),
        ("The answer is A careful reading away.", None),
        ("Options A, B and C all look plausible; I cannot decide.", None),
        ("Answer: Alice met Bob.", None),
        ("**A**: 3\n**B**: 4\n**C**: 5\nI am not sure which.", None),
        ("**A**: 3\n**B**: 4\nSo the answer is **B**.", "B"),
        ("The answer is (c).", "C"),
        ("The answer is not A. The answer is C", "C"),
        ("Option A is wrong and so is option B.", None),
        ("The correct option is D.", "D"),
        ("Final Answer:\n\nB", "B"),
        ("Let me think.\nC\n", "C"),
        ("I'll go with B.", "B"),
        ("The answer is I.", "I"),
        ("I believe the answer I gave earlier was wrong.", None),
        ("ANSWER: (E) 17 apples", "E"),
        ("**Answer:** B", "B"),
        ("The answer is: **C**", "C"),
        ("Answer: B\nOn reflection: \\boxed{C}", "C"),
        ("\\boxed{42}", None),
        ("", None),
        (None, None),
    ],
)
def test_extract_choice(text, expected):
    assert extract_choice(text) == expected


def test_extract_choice_respects_n_choices():
    assert extract_choice("The answer is E", n_choices=4) is None
    assert extract_choice("The answer is D", n_choices=4) == "D"
    assert extract_choice("The answer is D. No wait, the answer is F.", n_choices=4) == "D"
    assert extract_choice("Answer: K") is None  # beyond the default 10 letters
    assert extract_choice("Answer: K", n_choices=11) == "K"


def test_score_multiple_choice():
    assert score_multiple_choice("Answer: (B)", "B") == 1.0
    assert score_multiple_choice("Answer: (B)", "(b)") == 1.0
    assert score_multiple_choice("Answer: C", "B") == 0.0
    assert score_multiple_choice("I am not sure.", "B") == 0.0
    assert score_multiple_choice(None, "B") == 0.0


# =========================================================================== math
@pytest.mark.parametrize(
    "text, expected",
    [
        ("so \\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
        ("first \\boxed{a_{1}} then \\boxed{x^{2}+1}.", "x^{2}+1"),
        ("\\boxed{\\left\\{1, 2\\right\\}}", "\\left\\{1, 2\\right\\}"),
        ("Final answer: $x = 3$.", "x = 3"),
        ("The answer is 42.", "42"),
        ("**Final Answer:** 3.5", "3.5"),
        ("answer: 12\nsomething else\nFinal answer: 13", "13"),
        ("I could not solve it.", None),
        ("\\boxed{unbalanced", None),
        ("", None),
    ],
)
def test_extract_math_answer(text, expected):
    assert extract_math_answer(text) == expected


@needs_math_verify
@pytest.mark.parametrize(
    "text, reference, expected",
    [
        ("Thus \\boxed{\\frac{1}{2}}", "0.5", 1.0),
        ("Thus \\boxed{0.5}", "\\frac{1}{2}", 1.0),
        ("\\boxed{x=3}", "3", 1.0),
        ("Final answer: x = 3", "3", 1.0),
        ("The answer is $x=3$.", "3", 1.0),
        ("\\boxed{3}", "x = 3", 1.0),
        ("\\boxed{\\sqrt{8}}", "2\\sqrt{2}", 1.0),
        ("\\boxed{1,000}", "1000", 1.0),
        ("\\boxed{4}", "3", 0.0),
        ("\\boxed{x=4}", "3", 0.0),
        ("Final answer: 0.33", "1/3", 0.0),
        ("asdf qwer zxcv", "3", 0.0),
        ("\\boxed{\\frac{}{}{{}}", "3", 0.0),
        ("The answer is yes.", "Yes", 1.0),
    ],
)
def test_score_math(text, reference, expected):
    assert score_math(text, reference) == expected


def test_numeric_fallback_without_math_verify(monkeypatch):
    monkeypatch.setattr(scoring, "_math_verify", lambda *a, **k: None)  # as if it failed / timed out
    assert score_math("\\boxed{\\frac{1}{2}}", "0.5") == 1.0
    assert score_math("\\boxed{\\dfrac{3}{4}}", "0.75") == 1.0
    assert score_math("Final answer: x = 3", "3") == 1.0
    assert score_math("\\boxed{1,000}", "1000") == 1.0
    assert score_math("\\boxed{50\\%}", "50") == 1.0
    assert score_math("\\boxed{0.3333333}", "1/3") == 1.0  # relative 1e-6
    assert score_math("\\boxed{0.3333}", "1/3") == 0.0
    assert score_math("\\boxed{-2.5e3}", "-2500") == 1.0
    assert score_math("\\boxed{4}", "3") == 0.0
    assert score_math("\\boxed{x^2}", "3") == 0.0
    assert score_math("\\boxed{" + "9" * 5000 + "}", "3") == 0.0  # too long to be a number


def _warm_math_worker():
    """Start a math-verify worker outside the timed part (its start-up is not under timeout_s)."""
    assert score_math("\\boxed{\\frac{2}{4}}", "0.5") == 1.0


@needs_math_verify
@pytest.mark.parametrize("pathological", ["\\boxed{9^{9^{9^{9}}}}", "\\boxed{(10^{10})!}"])
def test_score_math_pathological_input_times_out_promptly(pathological):
    _warm_math_worker()
    t0 = time.monotonic()
    assert score_math(pathological, "5", timeout_s=1.0) == 0.0
    assert time.monotonic() - t0 < 5.0
    # the killed worker is replaced on the next call
    _warm_math_worker()


@needs_math_verify
def test_score_math_from_threads():
    results: dict[int, float] = {}
    errors: list[BaseException] = []
    cases = [("\\boxed{\\frac{1}{2}}", "0.5", 1.0), ("\\boxed{x=3}", "3", 1.0), ("\\boxed{7}", "3", 0.0)] * 3

    def work(i, text, ref):
        try:
            results[i] = score_math(text, ref)
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i, t, r)) for i, (t, r, _) in enumerate(cases)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=120)
    assert not errors
    assert results == {i: exp for i, (_, _, exp) in enumerate(cases)}


@needs_math_verify
def test_score_math_pathological_from_a_thread():
    _warm_math_worker()
    out = {}
    th = threading.Thread(target=lambda: out.update(s=score_math("\\boxed{9^{9^{9^{9}}}}", "5", timeout_s=1.0)))
    t0 = time.monotonic()
    th.start()
    th.join(timeout=60)
    assert out == {"s": 0.0}
    assert time.monotonic() - t0 < 5.0


@needs_math_verify
def test_math_worker_protocol():
    """The worker module answers one JSON line per request, also for a request it cannot read."""
    requests = io.StringIO('{"gold": "\\\\boxed{\\\\frac{1}{2}}", "pred": "$0.5$"}\n'
                           '{"gold": "\\\\boxed{2}", "pred": "\\\\boxed{3}"}\n{"gold": 1\n')
    replies = io.StringIO()
    math_verify_worker.serve(requests, replies)
    lines = [json.loads(line) for line in replies.getvalue().splitlines()]
    assert lines[:3] == [{"ready": True}, {"ok": True, "result": True}, {"ok": True, "result": False}]
    assert lines[3]["ok"] is False and "JSONDecodeError" in lines[3]["error"] and len(lines) == 4


@needs_math_verify
def test_math_worker_starts_from_any_directory(tmp_path, monkeypatch):
    """The worker is ``python -m agents_llm.math_verify_worker``: it does not depend on the caller's directory
    or PYTHONPATH."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PYTHONPATH", raising=False)
    worker = scoring._MathWorker()
    try:
        assert worker.verify("\\boxed{\\frac{1}{2}}", "\\boxed{0.5}", 30.0) is True
        assert worker.verify("\\boxed{2}", "\\boxed{3}", 30.0) is False
    finally:
        worker.kill()


# =========================================================================== code
ADD = Task(
    id="add",
    domain="code",
    prompt='from typing import List\n\n\ndef _double(x):\n    return 2 * x\n\n\ndef add(xs: List[int]) -> int:\n'
    '    """Sum of the doubled numbers."""\n',
    tests="def check(candidate):\n    assert candidate([1, 2]) == 6\n    assert candidate([]) == 0\n\n\ncheck(add)\n",
    metadata={"entry_point": "add"},
)


def test_strip_code_fences():
    assert strip_code_fences("    return 1\n") == "    return 1\n"
    assert strip_code_fences("Here:\n```python\ndef f():\n    return 1\n```\nDone.") == "def f():\n    return 1\n"
    text = "```\nimport os\n```\nand\n```python\ndef add(xs):\n    return 0\n```"
    assert strip_code_fences(text, "add") == "def add(xs):\n    return 0\n"
    assert strip_code_fences("```python\ndef f():\n    return 1\n") == "def f():\n    return 1\n"  # unclosed


def test_build_program_keeps_prompt_imports_and_helpers_with_full_definition():
    completion = "```python\ndef add(xs: List[int]) -> int:\n    return sum(_double(x) for x in xs)\n```"
    program = build_program(ADD, completion)
    assert program.startswith("from typing import List")
    assert "def _double" in program
    assert program.index("return sum(_double") > program.index('"""Sum of the doubled numbers."""')
    assert "```" not in program
    assert program.rstrip().endswith("check(add)")
    ns: dict = {}
    exec(compile(program, "<program>", "exec"), ns)  # our own trusted code: runs the tests


def test_build_program_body_continuation_and_flush_left_body():
    ns: dict = {}
    exec(build_program(ADD, "    return sum(_double(x) for x in xs)\n"), ns)
    ns = {}
    exec(build_program(ADD, "return sum(_double(x) for x in xs)\n"), ns)  # indented for the model


def test_build_program_natural_language_prompt():
    task = Task(id="nl", domain="code", prompt="Write a function add(a, b) returning the sum.",
                tests="assert add(2, 3) == 5\n")
    program = build_program(task, "def add(a, b):\n    return a + b\n")
    assert "Write a function" not in program
    exec(program, {})


@pytest.mark.parametrize(
    "completion, expected",
    [
        ("    return sum(_double(x) for x in xs)\n", 1.0),
        ("```python\ndef add(xs):\n    return sum(2 * x for x in xs)\n```", 1.0),
        ("    return sum(xs)\n", 0.0),
        ("    return sum(_double(x) for x in xs\n", 0.0),  # syntax error
        ("def add(xs) return 0", 0.0),  # syntax error in a full definition
        ("", 0.0),
    ],
)
def test_score_code(completion, expected):
    _sandbox()
    s, res = score_code(completion, ADD, timeout_s=20.0)
    assert s == expected, res.stderr
    assert res.ok == (expected == 1.0)
    assert not res.timed_out


def test_score_code_reports_syntax_error():
    _sandbox()
    s, res = score_code("    return (\n", ADD, timeout_s=20.0)
    assert s == 0.0 and not res.timed_out
    assert "SyntaxError" in res.stderr


def test_score_code_infinite_loop_times_out():
    _sandbox()
    t0 = time.monotonic()
    s, res = score_code("    while True:\n        pass\n", ADD, timeout_s=2.0)
    assert s == 0.0
    assert res.timed_out and not res.ok
    assert time.monotonic() - t0 < 15.0


def test_score_code_without_tests_is_an_error():
    task = Task(id="x", domain="code", prompt="def f():\n", tests=None)
    with pytest.raises(ValueError, match="no tests"):
        build_program(task, "    return 1\n")


# =========================================================================== dispatch
MC = Task(id="mc", domain="reasoning", prompt="Which?\n\nA. x\nB. y\nC. z", reference="C",
          metadata={"choices": ["x", "y", "z"]})
MATH = Task(id="m", domain="math", prompt="Half?", reference="0.5")


def test_score_dispatch_multiple_choice_and_math():
    assert score(MC, "Thinking... the answer is (C).") == 1.0
    assert score(MC, "The answer is B.") == 0.0
    assert score(MC, "The answer is D.") == 0.0  # only three options
    assert score(MATH, "Final answer: 1/2") == 1.0
    assert score(MATH, "\\boxed{0.25}") == 0.0


@pytest.mark.parametrize("text", [None, "", "I have no idea.", "Let me think step by step... (no conclusion)"])
def test_score_no_answer_is_zero_no_crash(text):
    assert score(MC, text) == 0.0
    assert score(MATH, text) == 0.0


def test_score_dispatch_code():
    _sandbox()
    assert score(ADD, "    return sum(_double(x) for x in xs)\n") == 1.0
    assert score(ADD, "I would rather not write code.") == 0.0
    assert score(ADD, None) == 0.0


def test_score_reasoning_without_choices_uses_answer_matching():
    task = Task(id="r", domain="reasoning", prompt="How many legs has a spider?", reference="8")
    assert score(task, "Spiders have eight legs. Final answer: 8") == 1.0
    assert score(task, "Final answer: 6") == 0.0
