"""train_qmix.py at simulator scale (``sim_scale.batch``): a batch of one is the one-episode loop,
a batched run resumes exactly, the simulator-only options (noise samples, privileged mixer state) run
end to end, and the settings that cannot go together are one-line config errors."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

import train_qmix
from run_checks import read_checkpoint
from learners.config import load_experiment
from topo_env.engine.backend_registry import BATCH_SIMULATOR, backend_offers
from topo_env.engine.config_checks import ConfigError

torch.set_num_threads(1)

SMALL = ["--set", "runtime.torch_threads=1", "--set", "train.eval_episodes=50", "--set", "train.references=false", "--set", "train.warmup_episodes=8",
         "--set", "qmix.batch_size=8", "--set", "train.checkpoint_every=8", "--set", "train.log_every=4",
         "--set", "qmix.hidden_dim=16", "--set", "exploration.eps_anneal_episodes=24", "--set", "qmix.lr_anneal_episodes=24", "--set", "env.embed_dim=32",
         "--set", "sim_scale.teacher_episodes=0", "--set", "train.validate_every=0", "--set", "train.curve_every=0",
         "--set", "qmix.episodes_per_update=1", "--set", "sim_scale.noise_samples=0", "--set", "sim_scale.privileged_state=false",
         "--set", "qmix.mixer_warmup=0",
         "--no-progress", "--no-pictures"]


def train(out: Path, *extra: str) -> int:
    return train_qmix.main([*SMALL, "--out", str(out), *extra])


def assert_same_run(a: Path, b: Path) -> None:
    """The same networks, optimiser step count and replay, and the same held-out figures."""
    ca, cb = read_checkpoint(a), read_checkpoint(b)
    assert ca["episode"] == cb["episode"] and ca["learner"]["updates"] == cb["learner"]["updates"] > 0
    for part in ("agent", "mixer", "target_agent", "target_mixer"):
        for name, tensor in ca["learner"][part].items():
            assert torch.equal(tensor, cb["learner"][part][name]), (part, name)
    for name, array in ca["buffer"]["data"].items():
        np.testing.assert_array_equal(array, cb["buffer"]["data"][name], err_msg=name)
    np.testing.assert_array_equal(ca["buffer"]["policy_version"], cb["buffer"]["policy_version"])
    ra, rb = (json.loads((d / "results.json").read_text()) for d in (a, b))
    assert ra["eval"] == rb["eval"]


@pytest.mark.parametrize("shares", [[], ["--set", "exploration.team_explore=0.5", "--set", "exploration.deviation_explore=0.3",
                                         "--set", "qmix.episodes_per_update=3", "--set", "qmix.updates_per_episode=2"]],
                         ids=["independent", "shares"])
def test_a_batch_of_one_is_the_one_episode_loop(tmp_path, shares):
    assert train(tmp_path / "loop", "--episodes", "24", "--set", "sim_scale.batch=0", *shares) == 0
    assert train(tmp_path / "batch1", "--episodes", "24", "--set", "sim_scale.batch=1", *shares) == 0
    assert_same_run(tmp_path / "loop", tmp_path / "batch1")


def test_a_batched_run_resumes_exactly(tmp_path):
    batched = ["--set", "sim_scale.batch=8", "--set", "sim_scale.noise_samples=2", "--set", "sim_scale.privileged_state=true"]
    assert train(tmp_path / "straight", "--episodes", "32", *batched) == 0
    assert train(tmp_path / "halves", "--episodes", "16", *batched) == 0
    assert read_checkpoint(tmp_path / "halves")["episode"] == 16
    assert train_qmix.main(["--resume", str(tmp_path / "halves"), "--episodes", "32", "--no-progress",
                            "--no-pictures"]) == 0
    assert_same_run(tmp_path / "straight", tmp_path / "halves")
    result = json.loads((tmp_path / "straight" / "results.json").read_text())
    assert result["train"]["episodes"] == 32 and set(result["eval"]) >= {"qmix", "solo", "random", "full"}
    state = read_checkpoint(tmp_path / "straight")["buffer"]["data"]
    assert state["return_target"].any() and state["state"].shape[-1] > read_checkpoint(tmp_path / "straight")[
        "buffer"]["data"]["obs"].shape[-1] * 3  # env state plus the privileged features


def test_init_from_a_privileged_run_takes_its_agent_network_only(tmp_path, capsys):
    """The agent network reads observations only, so it carries over; the mixer read the
    simulator's privileged state, so a run without it starts its mixer afresh and says so."""
    assert train(tmp_path / "rich", "--episodes", "16", "--set", "sim_scale.batch=8",
                 "--set", "sim_scale.privileged_state=true") == 0
    assert train(tmp_path / "plain", "--episodes", "8", "--set", "sim_scale.batch=8", "--set", "train.warmup_episodes=64",
                 "--init-from", str(tmp_path / "rich")) == 0  # no update: the loaded network is what it plays
    assert "its agent network; the mixer starts afresh (sim_scale.privileged_state is True there and False here)" \
        in capsys.readouterr().err
    rich, plain = read_checkpoint(tmp_path / "rich")["learner"], read_checkpoint(tmp_path / "plain")["learner"]
    assert plain["updates"] == 0
    for name, tensor in rich["agent"].items():
        assert torch.equal(tensor, plain["agent"][name]), name
    with pytest.raises(ConfigError, match="env.embed_dim is 32 there and 16 here"):
        train(tmp_path / "other", "--episodes", "8", "--set", "sim_scale.batch=8", "--set", "env.embed_dim=16",
              "--init-from", str(tmp_path / "rich"))


@pytest.mark.parametrize("sets, message", [
    (["sim_scale.batch=64", "runtime.episodes_in_flight=4"], "runtime.episodes_in_flight=4 with sim_scale.batch=64"),
    (["sim_scale.batch=-1"], "sim_scale.batch=-1: must be an integer >= 0"),
    (["sim_scale.noise_samples=-2"], "sim_scale.noise_samples=-2: must be an integer >= 0"),
    (["sim_scale.teacher_lr_schedule=cosine"], "sim_scale.teacher_lr_schedule='cosine': must be one of"),
    (["sim_scale.teacher_episodes=10", "train.episodes=6000000"], "would replay the teacher's"),
])
def test_settings_that_cannot_go_together_are_named(sets, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_experiment(None, sets)


@pytest.mark.parametrize("sets, off", [
    (["sim_scale.batch=0", "sim_scale.noise_samples=4", "sim_scale.privileged_state=true"],
     ["noise_samples", "privileged_state"]),
    (["sim_scale.batch=64", "env.backend=llm", "env.domain=reasoning", "env.backend.model=m",
      "env.backend.dataset=mmlu_pro_sample", "sim_scale.teacher_episodes=100"], ["teacher_episodes"]),
])
def test_simulator_only_options_are_off_with_a_note_where_they_cannot_apply(sets, off):
    cfg, notes = load_experiment(None, sets).effective()
    # one note names everything turned off: the aids, and a batch the batch simulator cannot play
    # (here: an LLM team)
    simulated = backend_offers(cfg.env.backend, BATCH_SIMULATOR)
    assert len(notes) == 1 and all(f"sim_scale.{key}" in notes[0] for key in off)
    assert ("sim_scale.batch," in notes[0]) == (not simulated)
    assert cfg.sim_scale.batched == (simulated and "sim_scale.batch=64" in sets)
    assert not any(getattr(cfg.sim_scale, key) for key in off)
    if "sim_scale.noise_samples=2" in sets:
        assert cfg.sim_scale.noise_samples == 2  # what can apply stays
    assert load_experiment(None, ["sim_scale.batch=64", "sim_scale.noise_samples=4"]).effective()[1] == []


def test_the_teacher_stays_on_for_any_team_size_and_rounds():
    """The teacher's references are searched for any N and T (topo_env.references.headroom): nothing is off."""
    for sets in (["env.rounds=3"], ["env.n_agents=5", "env.rounds=3"], ["env.n_agents=2", "env.rounds=1"]):
        cfg, notes = load_experiment(None, ["sim_scale.batch=64", "sim_scale.teacher_episodes=100", *sets]).effective()
        assert notes == [] and cfg.sim_scale.teacher_episodes == 100


def test_trace_out_needs_the_one_episode_loop(tmp_path):
    with pytest.raises(ConfigError, match="--trace-out with sim_scale.batch=8"):
        train(tmp_path / "t", "--episodes", "8", "--set", "sim_scale.batch=8", "--trace-out", str(tmp_path / "x.jsonl"))
