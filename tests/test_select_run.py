"""experiments/select_run.py: every run plays the same selection episodes, the pick is the best
mean, the differences are paired; with ``oracles`` the runs' distinct oracle sequences play the
same episodes beside them; runs of different envs and bad input name the bad value."""
from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

import train_qmix
from experiments import select_run
from learners.evaluation import QMIXPolicy, agent_from_checkpoint, evaluate, load_checkpoint, paired_difference
from topo_env.baselines import make_baseline
from topo_env.config import ConfigError
from topo_env.env import TopologyParallelEnv

torch.set_num_threads(1)

EPISODES = 30


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> list[Path]:
    out = []
    for seed in (0, 1):
        run = tmp_path_factory.mktemp(f"seed{seed}")
        assert train_qmix.main(["--episodes", "10", "--seed", str(seed), "--set", "train.eval_episodes=10",
                                "--set", "train.oracle_samples=10", "--set", "train.warmup_episodes=8",
                                "--set", "learner.batch_size=8", "--set", "learner.hidden_dim=32",
                                "--no-progress", "--no-pictures", "--out", str(run)]) == 0
        out.append(run)
    return out


def rewards_by_hand(run: Path, episodes: int) -> list[float]:
    cfg, checkpoint = load_checkpoint(run)
    env = TopologyParallelEnv(dataclasses.replace(cfg.env, split="train"))
    policy = QMIXPolicy(agent_from_checkpoint(checkpoint, cfg, env.obs_builder.dim))
    _, traces = evaluate(env, policy, episodes, seed=select_run.SELECTION_SEED, split="train", progress=False)
    return [t.reward for t in traces]


def test_runs_are_scored_on_common_episodes_and_the_best_is_picked(runs):
    result = select_run.select_run(runs, EPISODES, progress=False)
    by_hand = {str(run): rewards_by_hand(run, EPISODES) for run in runs}
    for name, rewards in by_hand.items():
        assert result["reward"][name] == pytest.approx(np.mean(rewards), abs=1e-12)
    best = max(by_hand, key=lambda name: np.mean(by_hand[name]))
    assert result["selected"] == best
    (other,) = set(by_hand) - {best}
    assert result["minus_selected"] == {other: paired_difference(by_hand[other], by_hand[best])}
    assert result["minus_selected"][other]["mean"] <= 0.0
    # a run's score does not depend on the other runs given: the episodes are common
    alone = select_run.select_run([runs[1]], EPISODES, progress=False)
    assert alone["reward"][str(runs[1])] == result["reward"][str(runs[1])]
    assert alone["selected"] == str(runs[1]) and alone["minus_selected"] == {}
    report = select_run.format_report(result)
    assert f"selected: {best}" in report and str(runs[0]) in report and str(runs[1]) in report


def _copy_with_oracle(run: Path, to: Path, sequence) -> Path:
    """A copy of ``run`` (checkpoint and results.json) whose oracle search picked ``sequence``."""
    to.mkdir()
    shutil.copy(run / "checkpoint.pt", to / "checkpoint.pt")
    results = json.loads((run / "results.json").read_text())
    results["eval"]["oracle_fixed"]["sequence"] = sequence
    (to / "results.json").write_text(json.dumps(results))
    return to


def test_oracles_play_the_runs_distinct_sequences_on_the_same_episodes(runs, tmp_path):
    all_solo = [["solo_process"] * 3] * 2
    first_sequence = json.loads((runs[0] / "results.json").read_text())["eval"]["oracle_fixed"]["sequence"]
    solo_run = _copy_with_oracle(runs[1], tmp_path / "solo_seed", all_solo)
    same_run = _copy_with_oracle(runs[1], tmp_path / "same_seed", first_sequence)
    result = select_run.select_run([*runs, solo_run, same_run], EPISODES, progress=False, oracles=True)
    sequences = result["oracles"]["sequences"]
    # one entry per distinct sequence, named after the first run whose search picked it
    assert f"oracle_fixed of {runs[0]}" in sequences and f"oracle_fixed of {same_run}" not in sequences
    assert sequences[f"oracle_fixed of {solo_run}"] == all_solo
    assert list(sequences.values()).count(first_sequence) == 1
    # all solo on the selection episodes is exactly the solo baseline there
    env_cfg, _ = load_checkpoint(runs[0])
    env = TopologyParallelEnv(dataclasses.replace(env_cfg.env, split="train"))
    _, solo_traces = evaluate(env, make_baseline("solo"), EPISODES, seed=select_run.SELECTION_SEED, split="train",
                              progress=False)
    solo = [t.reward for t in solo_traces]
    assert result["oracles"]["reward"][f"oracle_fixed of {solo_run}"] == pytest.approx(np.mean(solo), abs=1e-12)
    # the pick is made among the runs only, with the same figures as without the oracles
    without = select_run.select_run([*runs, solo_run, same_run], EPISODES, progress=False)
    assert {k: without[k] for k in ("selected", "reward", "minus_selected")} == \
           {k: result[k] for k in ("selected", "reward", "minus_selected")}
    picked = rewards_by_hand(Path(result["selected"]), EPISODES)
    assert result["oracles"]["minus_selected"][f"oracle_fixed of {solo_run}"] == paired_difference(solo, picked)
    rewards = result["oracles"]["reward"]
    assert result["oracles"]["best"] == max(rewards, key=rewards.__getitem__)
    report = select_run.format_report(result)
    best = result["oracles"]["best"]
    assert f"best oracle sequence: {best}: " in report and f"oracle_fixed of {solo_run}" in report


def test_oracles_need_results_json(runs, tmp_path):
    shutil.copy(runs[1] / "checkpoint.pt", tmp_path / "checkpoint.pt")  # a run without results.json
    without = select_run.select_run([runs[0], tmp_path], EPISODES, progress=False)  # fine without oracles
    assert set(without["reward"]) == {str(runs[0]), str(tmp_path)} and "oracles" not in without
    with pytest.raises(ConfigError, match="no results.json"):
        select_run.select_run([runs[0], tmp_path], EPISODES, progress=False, oracles=True)


def test_runs_of_different_envs_are_refused(runs, tmp_path):
    checkpoint = torch.load(runs[1] / "checkpoint.pt", map_location="cpu", weights_only=False)
    checkpoint["config"]["env"]["profile"] = "aime26"
    torch.save(checkpoint, tmp_path / "checkpoint.pt")
    with pytest.raises(ConfigError, match="env.profile: 'mmlu_pro' against 'aime26'"):
        select_run.select_run([runs[0], tmp_path], EPISODES, progress=False)


def test_bad_input_names_the_bad_value(runs, tmp_path, capsys):
    with pytest.raises(ConfigError, match="more than once"):
        select_run.select_run([runs[0], runs[0]], EPISODES, progress=False)
    assert select_run.main([str(runs[0]), str(tmp_path), "--no-progress"]) == 2
    assert str(tmp_path) in capsys.readouterr().err
    with pytest.raises(SystemExit):
        select_run.main([str(runs[0]), "--episodes", "0"])
    assert "--episodes 0" in capsys.readouterr().err
