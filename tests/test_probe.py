"""The probe protocol (agents_llm.probe): controlled calls to a real team, written as traces.

Fast tests run against the scriptable fake OpenAI server: the plan's call counts, that every call was
shown exactly the controlled inputs the trace says (the requests are rebuilt from the trace and found
among the server's), the cache replay, secrets, and one-line errors. One test runs the whole probe
against the real SmolLM2-135M on llama.cpp's server (kept to one task, one solo sample and one peer
confidence: 28 calls).
"""
from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import sys
from collections import Counter
from pathlib import Path

import topo_env
from agents_llm.local_server import free_port
from agents_llm.probe import (KINDS, ProbeOptions, answer_key, main, plan_counts,
                              synthetic_text, task_plan)
from agents_llm.prompts import agent_messages, decision_messages
from agents_llm.scoring import score
from agents_llm.tasks import load_jsonl
from topo_env.engine.team_backend import Message, Verdict
from topo_env.engine.roles import default_personas
from topo_env.engine.tasks import Task
from topo_env.fitting.fit import main as fit_main
from topo_env.engine.traces import read_traces

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fake_openai_server import FakeOpenAIServer  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[1]
PROG = "python -m agents_llm.probe"
SECRET = "sk-probe-secret-do-not-leak"
USAGE = {"prompt_tokens": 11, "completion_tokens": 7}
# What each probe kind must show, written out here (not taken from the module under test):
# (label, verdict) per peer message of a revision call / per final shown to the decision node.
PEERS = {"drift": [], "peer_right": [("right", 0)], "peer_trap": [("trap", 0)],
         "peer_trap2": [("trap", 0), ("trap", 0)], "peer_right_pass": [("right", 1)],
         "peer_trap_fail": [("trap", -1)], "peer_other": [("other", 0)]}
FINALS = {"decide_2right_1trap": [("right", 0), ("right", 0), ("trap", 0)],
          "decide_1right_2trap": [("right", 0), ("trap", 0), ("trap", 0)],
          "decide_pass_vs_trap": [("right", 1), ("trap", 0)],
          "decide_pass_vs_2trap": [("right", 1), ("trap", 0), ("trap", 0)]}
CODE_PROMPT = 'def double(x):\n    """Return twice x.\n    >>> double(2)\n    4\n    """\n'


def write_reasoning(path: Path, n: int = 3, n_choices: int = 4) -> Path:
    rows = [{"id": f"r{i}", "domain": "reasoning", "prompt": f"Which number is largest? (set {i})",
             "choices": ["1", "7", "3", "2"][:n_choices], "reference": "B", "category": "arithmetic"} for i in range(n)]
    path.write_text("\n".join(json.dumps(r) for r in rows))
    return path


def write_mixed(path: Path) -> Path:
    rows = [{"id": "m0", "domain": "math", "prompt": "What is 2 + 2?", "reference": "4", "subject": "algebra"},
            {"id": "c0", "domain": "code", "prompt": CODE_PROMPT, "tests": "assert double(3) == 6",
             "entry_point": "double", "canonical_solution": "    return 2 * x\n"}]
    path.write_text("\n".join(json.dumps(r) for r in rows))
    return path


def printed_counts(stdout: str) -> tuple[dict[str, int], int]:
    """Per-kind calls and the total of the plan printed before the run."""
    plan = stdout.split("total:")[0]
    counts = {m.group(1): int(m.group(2)) for m in re.finditer(r"(?m)^(\w+)\s+(\d+)\s{2}", plan) if m.group(1) in KINDS}
    total = int(re.search(r"(?m)^total: (\d+) calls$", stdout).group(1))
    return counts, total


def trace_counts(records: list[dict]) -> Counter:
    counts: Counter = Counter()
    for r in records:
        kind = r["task"]["metadata"]["probe"]["kind"]
        counts[kind] += sum(len(rnd["calls"]) for rnd in r["rounds"]) + int(r["decision"]["called"])
    return counts


def run_probe(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main([*argv, "--yes", "--no-progress"])
    out, err = capsys.readouterr()
    return rc, out, err


def message_of(rec: dict, role: str, text: str) -> Message:
    return Message(sender=rec["sender"], role=role, round=rec["round"], phase=rec["phase"], text=text,
                   answer=rec["answer"], confidence=rec["confidence"], content_tokens=0,
                   verdict=Verdict(rec["verdict"]), verdict_text=rec.get("verdict_text", ""))


def expected_requests(records: list[dict], tasks: dict[str, Task]) -> list[list[dict]]:
    """The chat requests every probe call must have sent, rebuilt from the trace alone."""
    from topo_env.engine.team_backend import AgentCall

    solo_text = {}
    for r in records:
        probe = r["task"]["metadata"]["probe"]
        if probe["kind"] == "solo":
            for c in r["rounds"][0]["calls"]:
                solo_text[(r["task"]["id"], c["agent"], probe["sample"])] = c["text"]
    wanted = []
    for r in records:
        task, probe, roles = tasks[r["task"]["id"]], r["task"]["metadata"]["probe"], tuple(r["roles"])
        personas = default_personas(task.domain, roles)
        for rnd in r["rounds"]:
            for c in rnd["calls"]:
                own = None
                if c["own_previous"] is not None:
                    text = solo_text[(task.id, c["agent"], probe["own_sample"])]
                    own = message_of(c["own_previous"], roles[c["agent"]], text)
                shown = tuple(message_of(m, roles[m["sender"]], m["text"]) for m in c["shown"])
                call = AgentCall(c["agent"], c["role"], rnd["round"], c["phase"], task, shown, own)
                wanted.append(agent_messages(call, task.domain, personas[c["agent"]], roles))
        if r["decision"]["called"]:
            finals = tuple(message_of(m, roles[m["sender"]], m["text"]) for m in r["decision"]["shown"])
            wanted.append(decision_messages(task, finals, task.domain, roles))
    return wanted


def check_controlled_inputs(records: list[dict], opts: ProbeOptions) -> None:
    """Every episode shows exactly what its probe kind promises."""
    solo = {}
    for r in records:
        probe = r["task"]["metadata"]["probe"]
        if probe["kind"] == "solo":
            (rnd,) = r["rounds"]
            assert rnd["round"] == 0 and [c["agent"] for c in rnd["calls"]] == list(range(opts.n_agents))
            for c in rnd["calls"]:
                assert c["shown"] == [] and c["own_previous"] is None and c["phase"] == "solo"
                solo[(r["task"]["id"], c["agent"], probe["sample"])] = c
    for r in records:
        probe = r["task"]["metadata"]["probe"]
        kind, answers = probe["kind"], probe["answers"]
        domain = r["task"]["domain"]
        assert probe["answers"]["trap"] is not None
        if kind in PEERS:
            (rnd,) = r["rounds"]
            (c,) = rnd["calls"]
            i = c["agent"]
            assert r["decision"]["called"] is False and rnd["round"] == 1 and rnd["active"][i] == 1
            own, mine = c["own_previous"], solo[(r["task"]["id"], i, probe["own_sample"])]
            assert (own["sender"], own["round"], own["answer"], own["confidence"], own["synthetic"]) == \
                (i, 0, mine["answer"], mine["confidence"], False)
            assert own["label"] == mine["label"]
            assert [(m["label"], m["verdict"]) for m in c["shown"]] == PEERS[kind]
            senders = [m["sender"] for m in c["shown"]]
            assert i not in senders and len(set(senders)) == len(senders) == sum(row[i] for row in rnd["adjacency"])
            for m in c["shown"]:
                assert m["synthetic"] is True and m["confidence"] == probe["confidence"]
                assert answer_key(domain, m["answer"]) == answer_key(domain, answers[m["label"]])
                assert f"Confidence: {probe['confidence']:g}" in m["text"]
                assert bool(m["verdict_text"]) == (m["verdict"] != 0)
        elif kind in FINALS:
            assert r["rounds"] == [] and r["decision"]["called"] is True
            shown = r["decision"]["shown"]
            assert Counter((m["label"], m["verdict"]) for m in shown) == Counter(FINALS[kind])
            conf = probe["confidence"]
            for m in shown:
                assert m["synthetic"] is True
                assert m["confidence"] == (conf["right"] if m["label"] == "right" else conf["wrong"])
                assert answer_key(domain, m["answer"]) == answer_key(domain, answers[m["label"]])
        else:
            assert kind == "solo"


# --------------------------------------------------------------------------- plan
def test_plan_counts_follow_the_protocol():
    opts = ProbeOptions()
    mc4 = Task("a", "reasoning", "q", "B", metadata={"choices": ["1", "2", "3", "4"]})
    mc2 = Task("b", "reasoning", "q", "B", metadata={"choices": ["1", "2"]})
    code_without = Task("c", "code", CODE_PROMPT, tests="assert double(3) == 6", metadata={"entry_point": "double"})
    plan = task_plan(mc4, opts)
    assert set(KINDS) == {"solo", *PEERS, *FINALS}
    assert plan == {"solo": 9, "drift": 9, **{k: 6 for k in PEERS if k != "drift"}, **{k: 2 for k in FINALS}}
    assert sum(plan.values()) == 62
    assert task_plan(mc2, opts)["peer_other"] == 0 and sum(task_plan(mc2, opts).values()) == 56
    no_right = task_plan(code_without, opts)
    assert [k for k, v in no_right.items() if v == 0] == ["peer_right", "peer_right_pass", *FINALS]
    small = ProbeOptions(n_agents=4, samples=1, confidences=(0.9,))
    assert task_plan(mc4, small) == {"solo": 4, "drift": 4, **{k: 4 for k in PEERS if k != "drift"},
                                     **{k: 1 for k in FINALS}}
    assert sum(plan_counts([mc4, mc2, code_without], opts).values()) == 62 + 56 + sum(no_right.values())


# --------------------------------------------------------------------------- fake server
def test_every_call_is_shown_exactly_the_controlled_inputs(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    data = write_reasoning(tmp_path / "tasks.jsonl")
    out, cache = tmp_path / "traces.jsonl", tmp_path / "cache.sqlite"
    argv = ["--dataset", str(data), "--tasks", "2", "--samples", "2", "--out", str(out), "--model", "m",
            "--cache", str(cache), "--seed", "5"]
    # the first task's solo stage gets six different texts (and confidences): own answers are told apart
    script = [("ok", f"Take {k}: I pick C.\nAnswer: C\nConfidence: 0.{k + 1}", USAGE) for k in range(6)]
    with FakeOpenAIServer(script + [("ok", "I pick C.\nAnswer: C\nConfidence: 0.7", USAGE)]) as srv:
        rc, stdout, stderr = run_probe(capsys, *argv, "--base-url", srv.base_url)
        assert rc == 0, stderr
        requests = [r["messages"] for r in srv.requests]
    counts, total = printed_counts(stdout)
    records = list(read_traces(out))
    # the printed plan is what was made, per kind and in all
    assert total == len(requests) == sum(trace_counts(records).values()) == 2 * (6 + 6 + 36 + 8)
    assert counts == dict(trace_counts(records)) and set(counts) == set(KINDS)
    assert f"Made {total} calls (0 served from the cache, {total} request(s)" in stdout
    opts = ProbeOptions(samples=2)
    check_controlled_inputs(records, opts)
    # the trace says exactly what the model was sent: rebuilt requests are the server's requests
    tasks = {t.id: t for t in load_jsonl(data)}
    assert sorted(map(json.dumps, expected_requests(records, tasks))) == sorted(map(json.dumps, requests))
    # every agent answered C: it is the observed trap; the other wrong answer is a fabricated option
    for r in records:
        meta = r["task"]["metadata"]
        assert meta["category"] == "arithmetic" and meta["probe"]["model"] == "m"
        ans = meta["probe"]["answers"]
        assert (ans["right"], ans["trap"], ans["trap_source"], ans["trap_count"]) == ("B", "C", "observed", 6)
        assert ans["other"] in ("A", "D") and ans["other_source"] == "fabricated"
    trap2 = [r for r in records if r["task"]["metadata"]["probe"]["kind"] == "peer_trap2"]
    assert {r["task"]["metadata"]["probe"]["confidence"] for r in trap2} == {0.6, 0.9}
    calls = [c for r in records for rnd in r["rounds"] for c in rnd["calls"]]
    assert all(c["label"] == "trap" and c["correct"] == 0.0 for c in calls)
    # the summary table: every kind, share trap 1 (everyone answered C), nobody switched
    table = stdout.split("total:")[1]
    for kind in KINDS:
        row = re.search(rf"(?m)^{kind}\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+(\S+)", table)
        assert row and int(row.group(1)) == counts[kind] and float(row.group(3)) == 1.0
        assert row.group(4) == ("-" if kind == "solo" or kind.startswith("decide") else "0.0000")
    # no secret anywhere
    assert SECRET not in out.read_text() and SECRET not in stdout and SECRET not in stderr
    assert SECRET.encode() not in cache.read_bytes()

    # a rerun replays every call from the cache: the server is gone (any request would fail), same file
    first = out.read_text()
    rc, stdout2, _ = run_probe(capsys, *argv, "--base-url", srv.base_url)
    assert rc == 0 and out.read_text() == first
    assert f"Made {total} calls ({total} served from the cache, 0 request(s)" in stdout2


def test_math_and_code_tasks(tmp_path, capsys):
    data = write_mixed(tmp_path / "mixed.jsonl")
    out = tmp_path / "traces.jsonl"
    reply = "```python\ndef double(x):\n    return x\n```\nSo the answer is \\boxed{5}.\nConfidence: 0.5"
    with FakeOpenAIServer([("ok", reply, USAGE)]) as srv:
        rc, stdout, stderr = run_probe(capsys, "--dataset", str(data), "--tasks", "2", "--samples", "1",
                                       "--confidences", "0.9", "--out", str(out), "--model", "m", "--base-url",
                                       srv.base_url, "--cache", "none")
        assert rc == 0, stderr
        n_requests = len(srv.requests)
    records = list(read_traces(out))
    _, total = printed_counts(stdout)
    assert total == n_requests == sum(trace_counts(records).values()) == 2 * 28
    check_controlled_inputs(records, ProbeOptions(samples=1, confidences=(0.9,)))
    tasks = {t.id: t for t in load_jsonl(data)}
    by_task = {r["task"]["id"]: r["task"]["metadata"]["probe"]["answers"] for r in records}
    # math: the observed wrong answer is the trap; the other wrong answer a perturbed number
    assert by_task["m0"]["trap"] == "5" and by_task["m0"]["trap_source"] == "observed"
    assert by_task["m0"]["other"] not in ("4", "5") and float(by_task["m0"]["other"]) == int(by_task["m0"]["other"])
    assert records[0]["task"]["metadata"]["subject"] == "algebra"
    # code: the right answer shown is the canonical solution and passes the hidden tests; the trap fails
    code = tasks["c0"]
    assert "return 2 * x" in by_task["c0"]["right"] and "return x" in by_task["c0"]["trap"]
    assert score(code, synthetic_text(code, by_task["c0"]["right"], 0.9)) == 1.0
    assert score(code, synthetic_text(code, by_task["c0"]["trap"], 0.9)) == 0.0
    passed = [m for r in records
              if r["task"]["id"] == "c0" and r["task"]["metadata"]["probe"]["kind"] == "peer_right_pass"
              for m in r["rounds"][0]["calls"][0]["shown"]]
    assert passed and all(m["verdict_text"] == "visible tests passed" and m["label"] == "right" for m in passed)
    assert {r["decision"]["accuracy"] for r in records if r["decision"]["called"]} == {0.0}


# --------------------------------------------------------------------------- command line
def run_cli(*argv: str, timeout: int = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "agents_llm.probe", *argv, "--no-progress"], capture_output=True,
                          text=True, cwd=REPO_ROOT, timeout=timeout, stdin=subprocess.DEVNULL)


def assert_one_line_error(proc: subprocess.CompletedProcess, *words: str) -> None:
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{PROG}: error: ") and "Traceback" not in proc.stderr, proc.stderr
    for word in words:
        assert word in lines[0], lines[0]


def test_bad_input_is_one_line_and_status_2(tmp_path):
    data = write_reasoning(tmp_path / "tasks.jsonl")
    out = tmp_path / "t.jsonl"
    common = ["--out", str(out), "--model", "m", "--cache", "none"]
    assert_one_line_error(run_cli("--dataset", "gsm9k", "--tasks", "2", *common), "'gsm9k'", "humaneval", "JSONL")
    assert_one_line_error(run_cli("--dataset", str(data), "--tasks", "0", *common), "--tasks", "'0'", ">= 1")
    assert_one_line_error(run_cli("--dataset", str(data), "--tasks", "7", *common), "--tasks 7", "at most 3")
    port = free_port()  # nobody listens there
    proc = run_cli("--dataset", str(data), "--tasks", "1", *common, "--base-url", f"http://127.0.0.1:{port}/v1")
    assert_one_line_error(proc, f"http://127.0.0.1:{port}/v1", "--base-url")
    assert "total: " in proc.stdout and not out.exists()  # the plan was printed, no trace written


def test_non_interactive_run_proceeds_without_yes(tmp_path):
    data = write_reasoning(tmp_path / "tasks.jsonl", n=1, n_choices=2)
    out = tmp_path / "t.jsonl"
    with FakeOpenAIServer([("ok", "Answer: A\nConfidence: 0.4", None)]) as srv:  # no usage: estimated tokens
        proc = subprocess.run([sys.executable, "-m", "agents_llm.probe", "--dataset", str(data), "--tasks", "1",
                               "--samples", "1", "--out", str(out), "--model", "m", "--base-url", srv.base_url,
                               "--cache", "none"], capture_output=True, text=True, cwd=REPO_ROOT, timeout=120,
                              stdin=subprocess.DEVNULL)
        n_requests = len(srv.requests)
    assert proc.returncode == 0, proc.stderr
    counts, total = printed_counts(proc.stdout)
    records = list(read_traces(out))
    assert counts["peer_other"] == 0 and total == n_requests == sum(trace_counts(records).values()) == 3 + 3 + 5 * 6 + 8
    assert "probe:" in proc.stderr  # the progress bar ran
    assert all(c["tokens_estimated"] for r in records for rnd in r["rounds"] for c in rnd["calls"])


# --------------------------------------------------------------------------- the real model
def test_end_to_end_with_the_local_smollm2(tmp_path, capsys):
    data = write_reasoning(tmp_path / "tasks.jsonl")
    out, cache = tmp_path / "traces.jsonl", tmp_path / "cache.sqlite"
    # --threads 1: why, in conftest.py's smollm2_server
    rc, stdout, stderr = run_probe(capsys, "--dataset", str(data), "--tasks", "1", "--samples", "1",
                                   "--confidences", "0.9", "--out", str(out), "--local", "--port", str(free_port()),
                                   "--max-tokens", "12", "--timeout", "300", "--concurrency", "2", "--threads", "1",
                                   "--cache", str(cache))
    assert rc == 0, stderr
    counts, total = printed_counts(stdout)
    records = list(read_traces(out))  # every line passes the schema
    assert total == 28 and dict(trace_counts(records)) == counts and set(counts) == set(KINDS)
    # every planned call reached the server once: one cached response each, all requests answered
    with sqlite3.connect(cache) as db:
        assert db.execute("SELECT COUNT(*) FROM responses").fetchone()[0] == total
    assert f"Made {total} calls (0 served from the cache, {total} request(s)" in stdout
    calls = [c for r in records for rnd in r["rounds"] for c in rnd["calls"]] + \
        [r["decision"] for r in records if r["decision"]["called"]]
    assert len(calls) == total
    assert all(not c["tokens_estimated"] and c["prompt_tokens"] > 0 and 0 < c["completion_tokens"] <= 12 for c in calls)
    assert sum(r["team_tokens"] for r in records) == sum(c["prompt_tokens"] + c["completion_tokens"] for c in calls)
    check_controlled_inputs(records, ProbeOptions(samples=1, confidences=(0.9,)))
    # the fit runs end to end on the real model's trace, and the env runs the profile it writes
    # (a 135M model's numbers mean nothing; the machinery is what is checked)
    profile_path = tmp_path / "smollm2.yaml"
    assert fit_main([str(out), "--out", str(profile_path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["episodes"] == len(records)  # 28 calls inform few parameters: the rest keep the base's values
    assert {p["status"] for p in report["parameters"]} <= {"fitted", "at bound", "not identified", "kept from base"}
    assert len(report["parameters"]) > 20 and "check" in report  # no env episode to replay: the fixed topologies only
    assert [r["topology"] for r in report["check"]["topologies"]] == ["solo", "full", "star", "debate"]
    env = topo_env.parallel_env(profile=str(profile_path))
    env.reset(seed=0)
    while env.agents:
        env.step({a: 1 for a in env.agents})
    assert env.decision is not None


def test_a_terminal_is_asked_before_any_call(tmp_path, capsys, monkeypatch):
    import io

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    data = write_reasoning(tmp_path / "tasks.jsonl", n=1)
    out = tmp_path / "t.jsonl"
    with FakeOpenAIServer() as srv:
        monkeypatch.setattr(sys, "stdin", Terminal("n\n"))
        rc = main(["--dataset", str(data), "--tasks", "1", "--out", str(out), "--model", "m", "--base-url",
                   srv.base_url, "--cache", "none", "--no-progress"])
        stdout = capsys.readouterr().out
        assert rc == 1 and srv.requests == [] and not out.exists()
        assert "Make these 62 calls? [y/N]" in stdout and "aborted: no call was made" in stdout
