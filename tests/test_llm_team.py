"""The env with a real-LLM team backend against a local OpenAI-compatible server."""
from __future__ import annotations

import json
import pickle
import re

import pytest

import topo_env
from topo_env.engine.team_backend import Verdict
from topo_env.engine.config_checks import ConfigError
from fake_openai_server import FakeOpenAIServer

USAGE = {"prompt_tokens": 20, "completion_tokens": 10}
SECRET = "sk-team-secret-never-written"


def reasoning_tasks(path):
    rows = [{"id": f"q{i}", "domain": "reasoning", "prompt": f"Question {i}: which option?",
             "choices": ["alpha", "beta", "gamma", "delta"], "reference": "B"} for i in range(6)]
    path.write_text("\n".join(json.dumps(r) for r in rows))
    return path


def code_tasks(path):
    prompt = ('def add(a, b):\n    """Return the sum.\n    >>> add(1, 2)\n    3\n    >>> add(-1, 1)\n    0\n    """\n')
    rows = [{"id": f"c{i}", "domain": "code", "prompt": prompt, "tests": "assert add(2, 3) == 5\nassert add(0, 0) == 0",
             "entry_point": "add"} for i in range(4)]
    path.write_text("\n".join(json.dumps(r) for r in rows))
    return path


def make_env(server, tmp_path, domain, dataset, **kw):
    backend = {"kind": "llm", "model": "team-model", "base_url": server.base_url, "api_key": SECRET,
               "backoff_s": 0.01, "timeout_s": 5.0, "cache_path": str(tmp_path / "cache.sqlite"),
               "dataset": str(dataset), "train_size": 2}
    return topo_env.parallel_env(backend=backend, domain=domain, rounds=2, render_mode="ansi", **kw)


def play(env, seed, actions):
    env.reset(seed=seed)
    infos = None
    for joint in actions:
        _, rewards, _, _, infos = env.step({f"agent_{i}": a for i, a in enumerate(joint)})
    return rewards, infos


def test_every_call_reaches_the_server_with_the_promised_messages(tmp_path):
    reply = "Let me think. The second option fits.\nAnswer: B\nConfidence: 0.8"
    with FakeOpenAIServer([("ok", reply, USAGE)]) as srv:
        env = make_env(srv, tmp_path, "reasoning", reasoning_tasks(tmp_path / "r.jsonl"))
        rewards, infos = play(env, 3, [(1, 0, 3), (5, 1, 0)])
        calls = [c for r in env.history for c in r.calls]
        assert len(srv.requests) == len(calls) + 1  # + FinalRefer
        # tokens: exactly the server's usage, summed over every call of the episode
        assert infos["agent_0"]["team_tokens"] == (len(calls) + 1) * 30
        assert infos["agent_0"]["accuracy"] == 1.0 and rewards["agent_0"] > 1.0
        # each request shows exactly the senders its in-edges promise
        shown = [sorted(int(x) for x in re.findall(r"\(agent (\d)\)", r["messages"][1]["content"]))
                 for r in srv.requests[:-1]]
        assert sorted(shown) == sorted(sorted(s for s, _ in c.received) for c in calls)
        decision = srv.requests[-1]["messages"][1]["content"]
        assert all(f"(agent {i})" in decision for i in range(3))


def test_rerun_is_served_from_the_cache(tmp_path):
    with FakeOpenAIServer([("ok", "Answer: C\nConfidence: 0.6", USAGE)]) as srv:
        env = make_env(srv, tmp_path, "reasoning", reasoning_tasks(tmp_path / "r.jsonl"))
        first = play(env, 7, [(1, 1, 1), (0, 0, 0)])
        text = env.transcript()
        n = len(srv.requests)
        again = make_env(srv, tmp_path, "reasoning", tmp_path / "r.jsonl")
        second = play(again, 7, [(1, 1, 1), (0, 0, 0)])
        assert len(srv.requests) == n  # no new call
        assert again.transcript() == text
        assert second[1]["agent_0"]["team_tokens"] == first[1]["agent_0"]["team_tokens"]
        assert first[1]["agent_0"]["accuracy"] == 0.0  # C is wrong


def test_execute_verify_runs_visible_tests_in_the_sandbox(tmp_path):
    good = "```python\ndef add(a, b):\n    return a + b\n```\nConfidence: 0.9"
    with FakeOpenAIServer([("ok", good, USAGE)]) as srv:
        env = make_env(srv, tmp_path, "code", code_tasks(tmp_path / "c.jsonl"))
        _, infos = play(env, 1, [(4, 0, 0), (4, 4, 0)])
        assert env.history[-1].finals[0].verdict == Verdict.PASS
        assert infos["agent_0"]["accuracy"] == 1.0
    bad = "```python\ndef add(a, b):\n    return a - b\n```\nConfidence: 0.9"
    with FakeOpenAIServer([("ok", bad, USAGE)]) as srv:
        env = make_env(srv, tmp_path / "b", "code", code_tasks(tmp_path / "c.jsonl"))
        _, infos = play(env, 1, [(4, 0, 0), (0, 0, 0)])
        assert env.history[0].finals[0].verdict == Verdict.FAIL
        assert infos["agent_0"]["accuracy"] == 0.0


def test_a_model_that_never_answers_scores_zero(tmp_path):
    with FakeOpenAIServer([("ok", "I am not sure what to say.", USAGE)]) as srv:
        env = make_env(srv, tmp_path, "reasoning", reasoning_tasks(tmp_path / "r.jsonl"))
        rewards, infos = play(env, 2, [(0, 0, 0), (0, 0, 0)])
    assert infos["agent_0"]["accuracy"] == 0.0 and rewards["agent_0"] < 0


def test_secrets_never_written(tmp_path):
    with FakeOpenAIServer([("ok", "Answer: B\nConfidence: 0.5", USAGE)]) as srv:
        env = make_env(srv, tmp_path, "reasoning", reasoning_tasks(tmp_path / "r.jsonl"))
        play(env, 0, [(1, 1, 1), (1, 1, 1)])
        blob = json.dumps(env.config.to_dict()) + repr(env.config) + env.transcript()
        assert SECRET not in blob
        assert SECRET.encode() not in (tmp_path / "cache.sqlite").read_bytes()
        clone = pickle.loads(pickle.dumps(env))  # no live client inside
        assert clone.backend.client._clients == {}


def test_llm_backend_config_errors(tmp_path):
    with pytest.raises(ConfigError, match="needs env.domain"):
        topo_env.parallel_env(backend={"kind": "llm", "model": "m", "dataset": "humaneval"})
    with pytest.raises(ConfigError, match=r"needs backend.model \(got \['dataset', 'kind'\]\)"):
        topo_env.parallel_env(backend={"kind": "llm", "dataset": "humaneval"}, domain="code")
    with pytest.raises(ConfigError, match="needs backend.dataset"):
        topo_env.parallel_env(backend={"kind": "llm", "model": "m"}, domain="code")
    with pytest.raises(ConfigError, match=r"backend kind 'llm' has no key\(s\) \['temp'\]"):
        topo_env.parallel_env(backend={"kind": "llm", "model": "m", "dataset": "humaneval", "temp": 1}, domain="code")
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(ConfigError, match="holds no code tasks"):
        topo_env.parallel_env(backend={"kind": "llm", "model": "m", "dataset": str(empty)}, domain="code")


@pytest.mark.parametrize("in_flight", [1, 2])
def test_a_real_team_is_evaluated_on_its_held_out_tasks_in_order_each_once(tmp_path, in_flight):
    """Episode k of an evaluation plays held-out task k (a fixed shuffled order), so four episodes
    on four held-out tasks see each once, whatever the seeds would have drawn, episodes in flight or not."""
    from learners.evaluation import evaluate
    from topo_env.frontends.inflight import sibling_envs
    from topo_env.references.baselines import make_baseline

    with FakeOpenAIServer([("ok", "Answer: B\nConfidence: 0.6", USAGE)]) as server:
        env = make_env(server, tmp_path, "reasoning", reasoning_tasks(tmp_path / "r.jsonl"))
        held_out = env.unwrapped.backend.tasks.splits["eval"]
        assert len(held_out) == 4 and [t.id for t in held_out] != sorted(t.id for t in held_out)  # shuffled
        figures, _ = evaluate(env, make_baseline("solo"), 4, seed=0, progress=False,
                              siblings=sibling_envs(env, in_flight)[1:])
        asked = [re.search(r"Question \d", r["messages"][-1]["content"]).group(0) for r in server.requests]
        env.close()
    assert figures["episodes"] == 4 and figures["accuracy"] == 1.0
    assert sorted(set(asked)) == sorted(t.prompt.split(":")[0] for t in held_out)
