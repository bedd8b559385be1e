"""Faults during a training run: the LLM server going down mid-run, and a full disk when a checkpoint
is written. The run stops with one line that says what was kept, its checkpoint stays consistent,
and --resume ends exactly where an uninterrupted run ends."""
from __future__ import annotations

import errno
import json

import pytest
import torch

import train_qmix
from run_checks import ONE_EPISODE_CONFIG
from fake_openai_server import FakeOpenAIServer
from test_llm_resume import tasks_file, train
from topo_env.engine.cli import RunError

torch.set_num_threads(1)
REPLY = ("ok", "Answer: A\nConfidence: 0.7", {"prompt_tokens": 9, "completion_tokens": 4})


def assert_same_run(a_dir, b_dir):
    a = torch.load(a_dir / "checkpoint.pt", weights_only=False)
    b = torch.load(b_dir / "checkpoint.pt", weights_only=False)
    assert a["episode"] == b["episode"]
    for part in ("agent", "mixer", "target_agent", "target_mixer"):
        for name, tensor in a["learner"][part].items():
            assert torch.equal(tensor, b["learner"][part][name]), f"{part}.{name} differs"
    res_a = json.loads((a_dir / "results.json").read_text())["eval"]
    res_b = json.loads((b_dir / "results.json").read_text())["eval"]
    assert res_a == res_b


def test_llm_server_going_down_mid_run_keeps_the_completed_episodes(tmp_path, capsys):
    data = tasks_file(tmp_path / "tasks.jsonl")
    with FakeOpenAIServer([REPLY]) as healthy:
        assert train(tmp_path / "straight", healthy, data, tmp_path / "a.sqlite") == 0
        per_run = len(healthy.requests)
    # a server that answers the first 35 calls (a few episodes), then only errors
    with FakeOpenAIServer([REPLY] * 35 + [("status", 500)]) as dying:
        with pytest.raises(SystemExit) as stopped:
            train_qmix.run_main(lambda: train(tmp_path / "cut", dying, data, tmp_path / "b.sqlite",
                                              "--set", "env.backend.max_retries=1"), "python train_qmix.py")
    assert stopped.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert "failed in training episode" in err and f"--resume {tmp_path / 'cut'}" in err
    ck = torch.load(tmp_path / "cut" / "checkpoint.pt", weights_only=False)
    assert 0 < ck["episode"] < 8 and ck["buffer"]["size"] == ck["episode"]  # exactly the completed episodes
    assert f"after the {ck['episode']} completed episodes" in err
    with FakeOpenAIServer([REPLY]) as back:
        assert train_qmix.main(["--resume", str(tmp_path / "cut"), "--no-progress",
                                "--set", f"env.backend.base_url={back.base_url}"]) == 0
        assert 0 < len(back.requests) < per_run  # the completed episodes were not played again
    assert_same_run(tmp_path / "straight", tmp_path / "cut")


def sim_run(out, *extra):
    return train_qmix.main(["--config", ONE_EPISODE_CONFIG, "--no-progress", "--no-pictures", "--out", str(out),
                            "--episodes", "12", "--set", "qmix.hidden_dim=16", "--set", "qmix.batch_size=4",
                            "--set", "train.warmup_episodes=4", "--set", "train.eval_episodes=5",
                            "--set", "train.references=false", "--set", "train.checkpoint_every=4",
                            "--set", "train.log_every=4", *extra])


@pytest.mark.parametrize("full_disk", [
    OSError(errno.ENOSPC, "No space left on device"),
    # how torch's zip writer reports it
    RuntimeError("[enforce fail at inline_container.cc:672] . PytorchStreamWriter failed writing file data/0: "
                 "file write failed")], ids=["oserror", "torch"])
def test_a_full_disk_at_checkpoint_keeps_the_previous_one(tmp_path, monkeypatch, full_disk):
    assert sim_run(tmp_path / "straight") == 0
    real_save, saves = torch.save, {"n": 0}

    def save(obj, fh, *args, **kwargs):
        saves["n"] += 1
        if saves["n"] == 2:  # the checkpoint of episode 8: half written, then the disk is full
            fh.write(b"half a checkpoint")
            raise full_disk
        return real_save(obj, fh, *args, **kwargs)

    monkeypatch.setattr(torch, "save", save)  # train_qmix.py's checkpoints (learners/training_run.py)
    with pytest.raises(RunError, match=r"the previous checkpoint \(episode 4\) is intact") as err:
        sim_run(tmp_path / "full")
    assert "\n" not in str(err.value) and "--resume" in str(err.value)
    monkeypatch.undo()
    assert sorted(f.name for f in (tmp_path / "full").glob("checkpoint*")) == ["checkpoint.pt"]
    assert torch.load(tmp_path / "full" / "checkpoint.pt", weights_only=False)["episode"] == 4
    assert train_qmix.main(["--resume", str(tmp_path / "full"), "--no-progress", "--no-pictures"]) == 0
    assert_same_run(tmp_path / "straight", tmp_path / "full")
