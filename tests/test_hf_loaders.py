"""Offline tests of agents_llm.hf_loaders: JSONL fixtures in each benchmark's schema."""
from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

pytest.importorskip("datasets")

from agents_llm import lcb_functional_worker, lcb_harness  # noqa: E402
from agents_llm.hf_loaders import BENCHMARKS, PER_CASE_TIMEOUT_S, load_benchmark  # noqa: E402
from agents_llm.scoring import build_test_program  # noqa: E402
from agents_llm.scoring import score_code  # noqa: E402
from agents_llm.sandbox import execute  # noqa: E402


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def _write(tmp_path, records, name="data.jsonl"):
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return str(path)


MMLU = [
    {"question_id": 70, "question": "Which is a prime?", "options": ["4", "6", "7", "9"], "answer": "C",
     "answer_index": 2, "cot_content": "", "category": "math", "src": "ori_mmlu-x"},
    {"question_id": 71, "question": "Capital of France?", "options": ["Paris", "Rome", "Oslo"], "answer": "A",
     "answer_index": 0, "cot_content": "", "category": "geography", "src": "ori_mmlu-y"},
]

STDIN_PROBLEM = {
    "question_title": "Sum",
    "question_content": "Read two integers A and B from standard input and print A+B.",
    "platform": "atcoder",
    "question_id": "abc001_a",
    "contest_id": "abc001",
    "contest_date": "2024-01-01T00:00:00",
    "starter_code": "",
    "difficulty": "easy",
    "public_test_cases": json.dumps([
        {"input": "1 2\n", "output": "3\n", "testtype": "stdin"},
        {"input": "10 -4\n", "output": "6\n", "testtype": "stdin"},
    ]),
    "private_test_cases": "eJzLSM3JyVcozy/KSQEAGgQEXQ==",  # an opaque blob: must not be decoded
    "metadata": "{}",
}
FUNCTIONAL_PROBLEM = {
    "question_title": "Two Sum",
    "question_content": "Return the indices of two numbers adding to target.",
    "platform": "leetcode",
    "question_id": "1",
    "contest_id": "weekly-1",
    "contest_date": "2024-01-02T00:00:00",
    "starter_code": "class Solution:\n    def twoSum(self, nums: List[int], target: int) -> List[int]:\n        ",
    "difficulty": "medium",
    "public_test_cases": json.dumps([
        {"input": "[2,7,11,15]\n9", "output": "[0, 1]", "testtype": "functional"},
        {"input": "[3,2,4]\n6", "output": "[1, 2]", "testtype": "functional"},
    ]),
    "private_test_cases": json.dumps([]),
    "metadata": json.dumps({"func_name": "twoSum"}),
}
# LeetCode style: no import of List (LiveCodeBench's prelude provides it); returns a tuple,
# which LiveCodeBench counts as a list; prints and a main guard must not disturb the harness.
TWO_SUM = """
class Solution:
    def twoSum(self, nums: List[int], target: int) -> List[int]:
        seen = {}
        for i, x in enumerate(nums):
            if target - x in seen:
                return seen[target - x], i
            seen[x] = i

print("debug output")
if __name__ == "__main__":
    print(Solution().twoSum([1, 2], 3), input())
"""


def test_mmlu_pro(tmp_path):
    tasks = load_benchmark("mmlu_pro", data_files=_write(tmp_path, MMLU))
    assert [t.id for t in tasks] == ["mmlu_pro/70", "mmlu_pro/71"]
    t = tasks[0]
    assert t.domain == "reasoning" and t.reference == "C"
    assert t.prompt.startswith("Which is a prime?")
    assert "A. 4\nB. 6\nC. 7\nD. 9" in t.prompt
    assert t.metadata["choices"] == ["4", "6", "7", "9"]
    assert t.metadata["category"] == "math" and t.metadata["question"] == "Which is a prime?"
    assert tasks[1].reference == "A" and "C. Oslo" in tasks[1].prompt


@pytest.mark.parametrize("name,records,ids,refs", [
    ("aime24",
     [{"ID": "2024-I-1", "Problem": "Find x.", "Solution": "x=204", "Answer": 204},
      {"ID": "2024-I-2", "Problem": "Find y.", "Solution": "y=25", "Answer": 25}],
     ["aime24/2024-I-1", "aime24/2024-I-2"], ["204", "25"]),
    ("aime25",
     [{"problem_idx": 1, "problem": "Compute a.", "answer": 70},
      {"problem_idx": 2, "problem": "Compute b.", "answer": 588}],
     ["aime25/1", "aime25/2"], ["70", "588"]),
    ("hmmt25",
     [{"problem_idx": 1, "problem": "Evaluate c.", "answer": "\\frac{1}{2}"},
      {"problem_idx": 2, "problem": "Evaluate d.", "answer": "2\\sqrt{3}"},
      {"problem_idx": 3, "problem": "Evaluate e.", "answer": "103"}],
     ["hmmt25/1", "hmmt25/2", "hmmt25/3"], ["\\frac{1}{2}", "2\\sqrt{3}", "103"]),
    ("beyond_aime",
     [{"problem": "Find n.", "answer": 1234}, {"problem": "Find m.", "answer": 99}],
     ["beyond_aime/0", "beyond_aime/1"], ["1234", "99"]),
])
def test_math_benchmarks(tmp_path, name, records, ids, refs):
    tasks = load_benchmark(name, data_files=_write(tmp_path, records))
    assert [t.id for t in tasks] == ids
    assert [t.reference for t in tasks] == refs
    assert all(t.domain == "math" and t.tests is None for t in tasks)
    first_problem = next(v for k, v in records[0].items() if k.lower() == "problem")
    assert tasks[0].prompt == first_problem


def test_livecodebench_tasks(tmp_path):
    tasks = load_benchmark("livecodebench", data_files=_write(tmp_path, [STDIN_PROBLEM, FUNCTIONAL_PROBLEM]))
    assert [t.id for t in tasks] == ["livecodebench/abc001_a", "livecodebench/1"]
    stdin_task, func_task = tasks
    assert all(t.domain == "code" and t.reference is None for t in tasks)
    assert all(t.metadata["test_harness"] == "livecodebench" for t in tasks)
    assert stdin_task.prompt == STDIN_PROBLEM["question_content"]
    assert stdin_task.metadata["tests_supported"] and stdin_task.metadata["n_tests"] == 2
    assert (stdin_task.metadata["n_stdin_tests"], stdin_task.metadata["n_functional_tests"]) == (2, 0)
    assert stdin_task.metadata["private_tests"].startswith("encoded")
    assert stdin_task.metadata["platform"] == "atcoder"
    # starter code is appended; functional tests are run
    assert FUNCTIONAL_PROBLEM["question_content"] in func_task.prompt
    assert "class Solution:" in func_task.prompt
    assert func_task.metadata["tests_supported"] is True
    assert (func_task.metadata["n_tests"], func_task.metadata["n_functional_tests"]) == (2, 2)
    assert func_task.metadata["per_case_timeout_s"] == PER_CASE_TIMEOUT_S
    assert func_task.metadata["lcb_metadata"] == {"func_name": "twoSum"}


def test_livecodebench_without_cases_is_unsupported(tmp_path):
    rec = dict(STDIN_PROBLEM, public_test_cases="[]", private_test_cases="")
    (task,) = load_benchmark("livecodebench", data_files=_write(tmp_path, [rec]))
    assert task.metadata["tests_supported"] is False and task.metadata["n_tests"] == 0
    res = execute(build_test_program(task, "print(1)"), timeout_s=20)
    assert res.returncode == 2 and "UNSUPPORTED" in res.stderr


def test_livecodebench_harness_runs(tmp_path):
    (task,) = load_benchmark("livecodebench", data_files=_write(tmp_path, [STDIN_PROBLEM]))
    good = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"
    wrong = "a, b = map(int, input().split())\nprint(a - b)\n"
    crash = "raise SystemExit(1)\n"
    ok = execute(build_test_program(task, good), timeout_s=30)
    assert ok.ok, ok.stderr
    assert "passed 2 case(s)" in ok.stdout
    bad = execute(build_test_program(task, wrong), timeout_s=30)
    assert not bad.ok and "wrong output" in bad.stderr
    assert not execute(build_test_program(task, crash), timeout_s=30).ok
    # the harness alone (no CANDIDATE_SOURCE) fails clearly instead of passing
    alone = execute(task.tests, timeout_s=30)
    assert not alone.ok and "CANDIDATE_SOURCE" in alone.stderr


def test_livecodebench_harness_is_its_module_after_one_data_line(tmp_path):
    """``tests`` is a comment, a literal HARNESS_CONFIG, then the text of agents_llm/lcb_harness.py (a real
    module); the functional worker's text travels in that data only when the task has functional cases."""
    (stdin_task,) = load_benchmark("livecodebench", data_files=_write(tmp_path, [STDIN_PROBLEM], "s.jsonl"))
    functional_task = _functional_task(tmp_path)
    for task, has_worker in ((stdin_task, False), (functional_task, True)):
        blank, comment, data_line, body = task.tests.split("\n", 3)
        assert blank == "" and comment.startswith("# ---- LiveCodeBench test harness")
        assert body == Path(lcb_harness.__file__).read_text(encoding="utf-8")
        name, _, literal = data_line.partition(" = ")
        config = ast.literal_eval(literal)
        assert name == "HARNESS_CONFIG" and config["per_case_timeout_s"] == PER_CASE_TIMEOUT_S
        worker_text = Path(lcb_functional_worker.__file__).read_text(encoding="utf-8")
        assert config["worker_source"] == (worker_text if has_worker else None)
        assert config["func_name"] == ("twoSum" if has_worker else None)
        assert [len(config["stdin_cases"]), len(config["functional_cases"])] == ([0, 2] if has_worker else [2, 0])


def test_functional_worker_reports_each_step():
    """The worker's job runner, in this process, on trusted code: load, start/result per case, done; and a
    load error for a missing function."""
    messages = []
    job = {"source": "def add(a, b):\n    return a + b\n", "func_name": "add", "prelude": "import math\n",
           "cases": [["1\n2", "3"], ["[1]\n[2]", "[1, 2]"]]}
    lcb_functional_worker.run_job(job, lambda **m: messages.append(m))
    assert [(m["event"], m.get("case"), m.get("status")) for m in messages] == [
        ("loaded", None, None), ("start", 0, None), ("result", 0, "pass"), ("start", 1, None),
        ("result", 1, "pass"), ("done", None, None)]
    messages.clear()
    lcb_functional_worker.run_job(dict(job, func_name="sub"), lambda **m: messages.append(m))
    assert messages == [{"event": "load_error", "detail": "the candidate (top level) defines no callable 'sub'"}]


def test_livecodebench_plain_json_private_tests_included(tmp_path):
    rec = dict(STDIN_PROBLEM, private_test_cases=json.dumps(
        [{"input": "100 200\n", "output": "300\n", "testtype": "stdin"}]))
    (task,) = load_benchmark("livecodebench", data_files=_write(tmp_path, [rec]))
    assert task.metadata["private_tests"] == "included" and task.metadata["n_tests"] == 3
    assert "100 200" in task.tests


def test_limit(tmp_path):
    path = _write(tmp_path, MMLU)
    assert [t.id for t in load_benchmark("mmlu_pro", data_files=path, limit=1)] == ["mmlu_pro/70"]
    assert load_benchmark("mmlu_pro", data_files=path, limit=0) == []
    assert len(load_benchmark("mmlu_pro", data_files=path, limit=10)) == 2
    with pytest.raises(ValueError, match="limit"):
        load_benchmark("mmlu_pro", data_files=path, limit=-1)


def test_missing_field(tmp_path):
    records = [dict(MMLU[0]), {k: v for k, v in MMLU[1].items() if k != "question"}]
    with pytest.raises(ValueError, match=r"mmlu_pro: record 1: missing field 'question'"):
        load_benchmark("mmlu_pro", data_files=_write(tmp_path, records))
    # a field absent from every record (the column does not exist at all)
    path = _write(tmp_path, [{"problem_idx": 1, "problem": "x"}], "noanswer.jsonl")
    with pytest.raises(ValueError, match=r"aime25: record 0: missing field 'answer'"):
        load_benchmark("aime25", data_files=path)
    path = _write(tmp_path, [{k: v for k, v in STDIN_PROBLEM.items() if k != "public_test_cases"}], "lcb.jsonl")
    with pytest.raises(ValueError, match=r"livecodebench: record 0: missing field 'public_test_cases'"):
        load_benchmark("livecodebench", data_files=path)


def test_bad_mc_answer(tmp_path):
    rec = dict(MMLU[0], answer="Z", answer_index=25)
    with pytest.raises(ValueError, match=r"record 0: field 'answer'"):
        load_benchmark("mmlu_pro", data_files=_write(tmp_path, [rec]))


def test_unknown_name():
    with pytest.raises(ValueError) as exc:
        load_benchmark("gsm8k")
    msg = str(exc.value)
    assert "'gsm8k'" in msg
    for name in ("mmlu_pro", "aime24", "aime25", "hmmt25", "beyond_aime", "livecodebench"):
        assert name in msg
    assert set(BENCHMARKS) == {"mmlu_pro", "aime24", "aime25", "hmmt25", "beyond_aime", "livecodebench"}


def test_missing_datasets_package(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def fake_import(name, *args, **kwargs):
        if name == "datasets":
            raise ImportError("no datasets")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", fake_import)
    with pytest.raises(ImportError, match="pip install datasets"):
        load_benchmark("aime25", data_files="unused.jsonl")


def test_score_code_runs_livecodebench_tasks_through_their_harness(tmp_path, monkeypatch):
    """scoring.score_code dispatches stdin tasks to the harness: right program 1.0, wrong 0.0."""
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    record = {"question_title": "Sum", "question_content": "Read two integers and print their sum.",
              "platform": "atcoder", "question_id": "s1", "contest_id": "c1", "contest_date": "2024-01-01",
              "starter_code": "", "difficulty": "easy",
              "public_test_cases": json.dumps([{"input": "1 2\n", "output": "3\n", "testtype": "stdin"}]),
              "private_test_cases": "[]", "metadata": "{}"}
    path = tmp_path / "lcb.jsonl"
    path.write_text(json.dumps(record) + "\n")
    task = load_benchmark("livecodebench", data_files=str(path))[0]
    good, _ = score_code("a, b = map(int, input().split())\nprint(a + b)", task, timeout_s=20)
    bad, _ = score_code("a, b = map(int, input().split())\nprint(a - b)", task, timeout_s=20)
    assert (good, bad) == (1.0, 0.0)


def test_score_code_gives_livecodebench_harness_time_for_every_case(tmp_path, monkeypatch):
    """The harness limits each case; the sandbox's wall limit covers all of them, so a slow
    but correct candidate is not cut off by the default 10 s."""
    import agents_llm.sandbox

    task = _functional_task(tmp_path)
    limits = []
    monkeypatch.setattr(agents_llm.sandbox, "execute", lambda code, timeout_s: limits.append(timeout_s) or execute(
        "pass", timeout_s=5))
    score_code("", task)
    score_code("", task, timeout_s=1000.0)
    assert limits == [(task.metadata["n_tests"] + 1) * PER_CASE_TIMEOUT_S, 1000.0]
    assert limits[0] > 10.0


# --------------------------------------------------------------------------- functional (call-based) cases
def _functional_task(tmp_path, **overrides):
    (task,) = load_benchmark("livecodebench", data_files=_write(tmp_path, [dict(FUNCTIONAL_PROBLEM, **overrides)]))
    return task


def test_livecodebench_functional_correct_solution_passes(tmp_path):
    task = _functional_task(tmp_path)
    score, res = score_code("```python" + TWO_SUM + "```", task, timeout_s=30)
    assert score == 1.0, res.stderr
    assert "case 0 (functional): passed" in res.stdout and "case 1 (functional): passed" in res.stdout
    assert "passed 2 case(s)" in res.stdout
    assert "debug output" not in res.stdout  # the candidate's prints never reach the verdict


@pytest.mark.parametrize("name,code,message", [
    ("wrong", TWO_SUM.replace("return seen[target - x], i", "return [i, seen[target - x]]"),
     "case 0 (functional): wrong answer\nexpected: [0, 1]\ngot: [1, 0]"),
    ("raises", TWO_SUM.replace("seen = {}", "seen = {}[0]"), "KeyError: 0"),
    ("exits 0 at load", "import sys\nsys.exit(0)\n" + TWO_SUM, "SystemExit: 0"),
    ("exits 0 in the call", "import os\nclass Solution:\n    def twoSum(self, nums, target):\n        os._exit(0)\n",
     "exited (status 0) during the case"),
    ("no such method", "class Solution:\n    def two_sum(self, nums, target):\n        return [0, 1]\n",
     "class Solution defines no callable 'twoSum'"),
])
def test_livecodebench_functional_failures(tmp_path, name, code, message):
    score, res = score_code(code, _functional_task(tmp_path), timeout_s=30)
    assert score == 0.0 and res.returncode == 1, (name, res.stdout, res.stderr)
    assert message in res.stderr, res.stderr
    assert "FAILED:" in res.stderr


def test_livecodebench_functional_infinite_loop_hits_the_per_case_limit(tmp_path):
    """Case 0 passes, case 1 loops forever: the harness kills the worker after
    PER_CASE_TIMEOUT_S and reports it; the sandbox's own (longer) timeout is not needed."""
    loop = TWO_SUM.replace("seen = {}", "seen = {}\n        while len(nums) == 3:\n            pass")
    score, res = score_code(loop, _functional_task(tmp_path), timeout_s=30)
    assert score == 0.0 and not res.timed_out and res.returncode == 1, res.stderr
    assert "case 0 (functional): passed" in res.stdout
    assert f"case 1 (functional): timeout after {PER_CASE_TIMEOUT_S} s" in res.stderr
    assert res.wall_time_s < 30
    # the host carries on: the next candidate is scored normally
    assert score_code(TWO_SUM, _functional_task(tmp_path), timeout_s=30)[0] == 1.0


TOP_LEVEL_PROBLEM = dict(
    FUNCTIONAL_PROBLEM, question_id="pairs", question_title="Pairs",
    question_content="Return the pairs [i, j] (i < j) of indices whose values sum to target.",
    starter_code="def pairSums(nums: List[int], target: int) -> List[List[int]]:\n    ",
    public_test_cases=json.dumps([{"input": "[1,2,3,0]\n3", "output": "[[0, 1], [2, 3]]", "testtype": "functional"}]),
    metadata=json.dumps({"func_name": "pairSums"}))
PAIRS = """
def pairSums(nums, target):
    n = len(nums)
    return [[i, j] for i in range(n) for j in range(i + 1, n) if nums[i] + nums[j] == target]
"""


@pytest.mark.parametrize("code,passes", [
    (PAIRS, True),
    # a top-level tuple counts as a list, as in LiveCodeBench ...
    (PAIRS.replace("return [", "return tuple([").replace("target]\n", "target])\n"), True),
    # ... but nested tuples do not (LiveCodeBench compares with ==: (0, 1) != [0, 1])
    (PAIRS.replace("[[i, j] for", "[(i, j) for"), False),
], ids=["list of lists", "tuple of lists", "list of tuples"])
def test_livecodebench_top_level_function_and_sequence_comparison(tmp_path, code, passes):
    (task,) = load_benchmark("livecodebench", data_files=_write(tmp_path, [TOP_LEVEL_PROBLEM]))
    score, res = score_code(code, task, timeout_s=30)
    assert score == (1.0 if passes else 0.0), res.stderr
    if not passes:
        assert "wrong answer" in res.stderr and "got: [(0, 1), (2, 3)]" in res.stderr


def test_livecodebench_problem_with_both_kinds_runs_both(tmp_path):
    rec = dict(TOP_LEVEL_PROBLEM, question_id="mixed", metadata=json.dumps({"func_name": "add"}),
               public_test_cases=json.dumps([
                   {"input": "1 2\n", "output": "3\n", "testtype": "stdin"},
                   {"input": "4\n5", "output": "9", "testtype": "functional"},
               ]))
    (task,) = load_benchmark("livecodebench", data_files=_write(tmp_path, [rec]))
    assert (task.metadata["n_stdin_tests"], task.metadata["n_functional_tests"]) == (1, 1)
    both = ("import sys\ndef add(a, b):\n    return a + b\n"
            "if __name__ == '__main__':\n    print(add(*map(int, sys.stdin.read().split())))\n")
    score, res = score_code(both, task, timeout_s=30)
    assert score == 1.0, res.stderr
    assert "case 0 (stdin): passed" in res.stdout and "case 1 (functional): passed" in res.stdout
    function_only = "def add(a, b):\n    return a + b\n"  # prints nothing for the stdin case
    score, res = score_code(function_only, task, timeout_s=30)
    assert score == 0.0 and "case 0 (stdin): wrong output" in res.stderr


@pytest.mark.parametrize("overrides,message", [
    ({"metadata": "{}"}, r"record 0: field 'metadata' must name the function"),
    ({"public_test_cases": json.dumps([{"input": "[1,2\n3", "output": "[0]", "testtype": "functional"}])},
     r"record 0: field 'public_test_cases': case 0: functional input line 0 is not JSON"),
    ({"private_test_cases": json.dumps([{"input": "[1]", "output": "nope", "testtype": "functional"}])},
     r"record 0: field 'private_test_cases': case 0: functional output is not JSON"),
    ({"public_test_cases": json.dumps([{"input": "1", "output": "1", "testtype": "interactive"}])},
     r"record 0: field 'public_test_cases': case 0: unknown testtype 'interactive'"),
])
def test_livecodebench_bad_functional_records(tmp_path, overrides, message):
    with pytest.raises(ValueError, match=message):
        _functional_task(tmp_path, **overrides)
