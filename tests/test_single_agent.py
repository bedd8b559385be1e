"""The single-agent study (studies.single_agent): one agent of a real team alone on the first held-out
tasks, scored by the team's scorer, tokens from usage, per subject and bucket; bad input in one line."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import yaml

from agents_llm.small_math import generate
from agents_llm.team import TaskPool
from fake_openai_server import FakeOpenAIServer
from studies import single_agent

USAGE = {"prompt_tokens": 30, "completion_tokens": 5}


def team_config(tmp_path, server, **backend):
    path = tmp_path / "team.yaml"
    path.write_text(yaml.safe_dump({
        "env": {"domain": "math", "backend": {"kind": "llm", "model": "m", "base_url": server.base_url,
                                              "dataset": "small_math", "train_size": 600, "backoff_s": 0.01,
                                              "cache_path": str(tmp_path / "cache.sqlite"), **backend}},
        "runtime": {"episodes_in_flight": 3}}))
    return str(path)


def test_one_agent_answers_each_of_the_first_held_out_tasks_once(tmp_path):
    held_out = TaskPool(generate(), train_size=600).splits["eval"][:40]
    with FakeOpenAIServer([("ok", "I count 7 of them.", USAGE)]) as server:
        result = single_agent.answer_alone(team_config(tmp_path, server), 40, agent=2, progress=False)
        prompts = [r["messages"][-1]["content"] for r in server.requests]
        system = {r["messages"][0]["content"] for r in server.requests}
    assert [r["task_id"] for r in result["rows"]] == [t.id for t in held_out]
    assert sorted(prompts) == sorted(f"Task:\n{t.prompt}" for t in held_out)  # alone: no teammates, once each
    assert len(system) == 1 and "AnalyzeAgent" in system.pop() and result["role"] == "analyzer"
    right = [t.reference == "7" for t in held_out]
    assert 0 < sum(right) < 40 and result["accuracy"] == pytest.approx(sum(right) / 40)
    assert result["accuracy_se"] == pytest.approx(np.std(right, ddof=1) / np.sqrt(40)) and result["accuracy_se"] > 0
    assert result["tokens_per_task"] == 35
    assert sum(s["tasks"] for s in result["by_subject"].values()) == 40
    assert sum(s["tasks"] for s in result["by_bucket"].values()) == 40


def test_the_command_prints_a_table_and_writes_json(tmp_path):
    with FakeOpenAIServer([("ok", "\\boxed{7}", USAGE)]) as server:
        config = team_config(tmp_path, server)
        run = subprocess.run([sys.executable, "-m", "studies.single_agent", "--config", config, "--tasks", "12",
                              "--no-progress", "--out", str(tmp_path / "a.json")], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert "accuracy (pts)" in run.stdout and "subject addition" in run.stdout
    written = json.loads((tmp_path / "a.json").read_text())
    assert written["tasks"] == 12 and len(written["rows"]) == 12


def run_command(argv, capsys):
    """``python -m studies.single_agent ARGV`` in this process: (exit status, stderr)."""
    with pytest.raises(SystemExit) as stop:
        sys.exit(single_agent.run_main(lambda: single_agent.main(argv), single_agent.PROG))
    return stop.value.code, capsys.readouterr().err


@pytest.mark.parametrize("args, message", [
    (["--tasks", "601"], "--tasks 601: the held-out split holds 600 tasks"),
    (["--tasks", "5", "--agent", "3"], "--agent 3: the team has agents 0 .. 2"),
    (["--tasks", "0"], "--tasks"),
])
def test_bad_input_is_one_line(tmp_path, capsys, args, message):
    with FakeOpenAIServer() as server:
        status, err = run_command(["--config", team_config(tmp_path, server), *args], capsys)
        assert not server.requests
    assert status == 2 and message in err and len(err.strip().splitlines()) == 1


def test_a_simulated_team_is_refused(capsys):
    status, err = run_command(["--config", "configs/default.yaml", "--tasks", "5"], capsys)
    assert status == 2 and "calls a real team" in err and "Traceback" not in err
