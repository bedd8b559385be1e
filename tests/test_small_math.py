"""The small-model task set (agents_llm.small_math): deterministic, exact integer answers that the
scorer accepts, four subjects at three difficulty levels with their verifiability, and loadable by
name through env.backend.dataset and --dataset, or written to JSONL and read back."""
from __future__ import annotations

import collections

import pytest

from agents_llm import small_math
from agents_llm.datasets import BUILT_IN, load_dataset
from agents_llm.prompts import parse_reply
from agents_llm.scoring import last_number, score, score_math
from agents_llm.tasks import load_jsonl, save_jsonl, split_tasks
from topo_env import ConfigError, EnvConfig
from topo_env.engine.tasks import Task


def test_the_set_is_the_same_on_every_call_and_differs_by_seed():
    a, b = small_math.generate(per_cell=5), small_math.generate(per_cell=5)
    assert a == b and len(a) == 4 * 3 * 5
    assert [t.prompt for t in small_math.generate(per_cell=5, seed=1)] != [t.prompt for t in a]
    assert len({t.id for t in a}) == len(a)


def test_every_cell_and_its_verifiability():
    tasks = small_math.generate(per_cell=3)
    cells = collections.Counter((t.metadata["subject"], t.metadata["bucket"]) for t in tasks)
    assert cells == {(s, b): 3 for s in small_math.SUBJECTS for b in range(3)}
    for t in tasks:
        assert t.domain == "math" and t.metadata["verifiable"] == (t.metadata["subject"] != "facts")


@pytest.mark.parametrize("subject", small_math.SUBJECTS)
def test_the_reference_is_the_right_integer_and_the_scorer_takes_it(subject):
    for t in small_math.generate(per_cell=20, subjects=[subject]):
        answer = int(t.reference)
        assert t.prompt.endswith(" " + small_math.ANSWER_REQUEST) and t.metadata["answer_format"] == "number"
        question = t.prompt.removesuffix(" " + small_math.ANSWER_REQUEST)
        if subject == "addition":
            a, b = (int(x) for x in question.removeprefix("What is ").removesuffix("?").split(" + "))
            assert answer == a + b and (a < 10 and b < 10) == (t.metadata["bucket"] == 0)
        elif subject == "comparison":
            a, b = (int(x) for x in question.split(", ")[1].split("?")[0].split(" or "))
            assert answer == max(a, b) and a != b and abs(a - b) <= 9
        assert score_math(f"so \\boxed{{{answer}}}", t.reference) == 1.0
        assert score_math(f"\\boxed{{{answer + 1}}}", t.reference) == 0.0
        # a bare reply is read by its last number, never by the confidence line
        assert score(t, f"It is {answer}.\nConfidence: 0.9") == 1.0
        assert score(t, f"{answer + 1} is the answer I think, not {answer - 1}. Confidence: {answer}") == 0.0


def test_a_bare_number_counts_only_where_the_task_asks_for_one():
    number_task = small_math.generate(per_cell=1, subjects=["addition"])[0]
    plain = Task(id="m", domain="math", prompt="What is 2 + 2?", reference="4")
    assert last_number("1,234 apples and 5.5 pears\nNEED: 3 hints") == "5.5"
    assert last_number("no number here") is None and last_number(None) is None
    assert parse_reply(f"The sum is {number_task.reference}.", number_task)[0] == number_task.reference
    assert parse_reply("The sum is 4.", plain) == (None, None)  # other math tasks still need a stated answer
    assert score(plain, "The sum is 4.") == 0.0 and score(plain, "\\boxed{4}") == 1.0


def test_harder_buckets_ask_for_more():
    add = {b: [t for t in small_math.generate(per_cell=30, subjects=["addition"]) if t.metadata["bucket"] == b]
           for b in range(3)}
    means = [sum(int(t.reference) for t in add[b]) / len(add[b]) for b in range(3)]
    assert means[0] < means[1] < means[2]
    words = [t for t in small_math.generate(per_cell=10, subjects=["word_problem"]) if t.metadata["bucket"] == 2]
    assert all("and then finds" in t.prompt for t in words)  # two steps


def test_loaded_by_name_written_and_read_back(tmp_path):
    assert "small_math" in BUILT_IN
    tasks = load_dataset("small_math", "backend.dataset", domain="math")
    assert len(tasks) == 4 * 3 * small_math.DEFAULT_PER_CELL
    path = tmp_path / "small.jsonl"
    save_jsonl(tasks[:50], path)
    again = load_jsonl(path)
    assert [(t.id, t.prompt, t.reference, t.metadata["bucket"], t.metadata["verifiable"]) for t in again] == \
        [(t.id, t.prompt, t.reference, t.metadata["bucket"], t.metadata["verifiable"]) for t in tasks[:50]]
    train, held_out = split_tasks(tasks, train_size=60, seed=0)
    assert len(train) == 60 and len(held_out) == len(tasks) - 60 and not {t.id for t in train} & {t.id for t in held_out}


def test_the_llm_config_takes_it_and_a_bad_name_is_one_line():
    cfg = EnvConfig.from_dict({"domain": "math", "backend": {"kind": "llm", "model": "smollm2", "dataset": "small_math"}})
    assert cfg.backend.dataset == "small_math"
    with pytest.raises(ConfigError, match=r"backend.dataset='tiny_math': no such dataset; give one of \['humaneval', "
                                          r"'small_math'\]"):
        load_dataset("tiny_math", "backend.dataset")
    with pytest.raises(ValueError, match="per_cell=0"):
        small_math.generate(per_cell=0)
    assert small_math.main(["--out", "/dev/null", "--per-cell", "1"]) == 0
