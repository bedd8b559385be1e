"""A QMIX run on an LLM team, stopped by Ctrl-C mid-run and resumed from its checkpoint, ends
exactly where an uninterrupted run ends: nothing is lost or replayed differently."""
from __future__ import annotations

import json
import os
import signal

import torch

import train_qmix
from run_checks import ONE_EPISODE_CONFIG
from fake_openai_server import FakeOpenAIServer
from learners.runner import EpisodeRunner

torch.set_num_threads(1)


def tasks_file(path):
    rows = [{"id": f"q{i}", "domain": "reasoning", "prompt": f"Question {i}?", "choices": ["a", "b", "c"],
             "reference": "A"} for i in range(8)]
    path.write_text("\n".join(json.dumps(r) for r in rows))
    return path


def train(out, server, data, cache, *extra):
    return train_qmix.main([
        "--config", ONE_EPISODE_CONFIG, "--no-progress", "--out", str(out), "--episodes", "8",
        "--set", "env.backend.kind=llm", "--set", "env.domain=reasoning", "--set", f"env.backend.dataset={data}",
        "--set", "env.backend.model=m", "--set", f"env.backend.base_url={server.base_url}",
        "--set", f"env.backend.cache_path={cache}", "--set", "env.backend.backoff_s=0.01",
        "--set", "env.backend.train_size=3", "--set", "qmix.hidden_dim=16",
        "--set", "qmix.batch_size=2", "--set", "train.warmup_episodes=2", "--set", "train.eval_episodes=1",
        "--set", "train.references=false", "--set", "train.checkpoint_every=100", "--set", "train.log_every=4",
        *extra,
    ])


def test_llm_run_stopped_and_resumed_equals_straight_run(tmp_path, monkeypatch):
    data = tasks_file(tmp_path / "tasks.jsonl")
    reply = "Answer: A\nConfidence: 0.7"
    with FakeOpenAIServer([("ok", reply, {"prompt_tokens": 9, "completion_tokens": 4})]) as server:
        assert train(tmp_path / "straight", server, data, tmp_path / "cache_a.sqlite") == 0
        with monkeypatch.context() as m:
            original, calls = EpisodeRunner.arun, {"n": 0}

            def run(self, *args, **kwargs):
                calls["n"] += 1
                if calls["n"] == 4:  # Ctrl-C while episode 3 is played
                    os.kill(os.getpid(), signal.SIGINT)
                return original(self, *args, **kwargs)

            m.setattr(EpisodeRunner, "arun", run)
            assert train(tmp_path / "resumed", server, data, tmp_path / "cache_b.sqlite") == 130
        requests_at_stop = len(server.requests)
        ck = torch.load(tmp_path / "resumed" / "checkpoint.pt", weights_only=False)
        assert ck["episode"] == 4 and ck["buffer"]["size"] == 4  # the interrupted episode completed
        assert train_qmix.main(["--resume", str(tmp_path / "resumed"), "--no-progress"]) == 0
        assert len(server.requests) > requests_at_stop  # the rest of the run did call the model
    a = torch.load(tmp_path / "straight" / "checkpoint.pt", weights_only=False)
    b = torch.load(tmp_path / "resumed" / "checkpoint.pt", weights_only=False)
    assert a["episode"] == b["episode"] == 8
    for part in ("agent", "mixer", "target_agent", "target_mixer"):
        for name, tensor in a["learner"][part].items():
            assert torch.equal(tensor, b["learner"][part][name]), f"{part}.{name} differs"
    res_a = json.loads((tmp_path / "straight" / "results.json").read_text())["eval"]
    res_b = json.loads((tmp_path / "resumed" / "results.json").read_text())["eval"]
    assert res_a == res_b
