"""experiments/rescore_run.py: on the run's own episodes it reproduces results.json; beyond them it
extends the same episode sequence; bad input names the bad value."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

import train_qmix
from experiments import rescore_run
from topo_env.config import ConfigError
from topo_env.oracle import actions_from_names, sequence_names

torch.set_num_threads(1)

EVAL_EPISODES = 20


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("rescore")
    assert train_qmix.main(["--episodes", "10", "--set", f"train.eval_episodes={EVAL_EPISODES}",
                            "--set", "train.oracle_samples=30", "--set", "train.warmup_episodes=8",
                            "--set", "learner.batch_size=8", "--set", "learner.hidden_dim=32",
                            "--no-progress", "--no-pictures", "--out", str(out)]) == 0
    return out


def test_the_runs_own_episodes_reproduce_results_json(run_dir):
    saved = json.loads((run_dir / "results.json").read_text())
    result = rescore_run.rescore(run_dir, EVAL_EPISODES, ["full"], progress=False)
    assert result["run_episodes"] == EVAL_EPISODES
    assert result["oracle_sequence"] == saved["eval"]["oracle_fixed"]["sequence"]
    for name in ("qmix", "oracle_fixed", "full"):
        assert result["reward"][name] == pytest.approx(saved["eval"][name]["reward"], abs=1e-12)
    for name in ("oracle_fixed", "full"):
        assert result["qmix_minus"][name]["run"] == pytest.approx(saved["qmix_minus"][name], abs=1e-12)
        assert result["qmix_minus"][name]["all"] == result["qmix_minus"][name]["run"]


def test_more_episodes_extend_the_runs_episodes(run_dir):
    short = rescore_run.rescore(run_dir, EVAL_EPISODES, [], progress=False)
    long = rescore_run.rescore(run_dir, 3 * EVAL_EPISODES, [], progress=False)
    assert long["episodes"] == 3 * EVAL_EPISODES and long["run_episodes"] == EVAL_EPISODES
    assert long["qmix_minus"]["oracle_fixed"]["run"] == short["qmix_minus"]["oracle_fixed"]["all"]
    assert set(long["reward"]) == {"qmix", "oracle_fixed"}
    report = rescore_run.format_report(long)
    assert "oracle_fixed" in report and f"first {EVAL_EPISODES}" in report and f"all {3 * EVAL_EPISODES}" in report


def _other_seed(run_dir: Path, tmp_path: Path, name: str, sequence=None, profile=None) -> Path:
    """A copy of the run's results.json whose search picked ``sequence`` (and, with ``profile``,
    trained another profile): the oracle another seed's search could have picked."""
    results = json.loads((run_dir / "results.json").read_text())
    if sequence is not None:
        results["eval"]["oracle_fixed"]["sequence"] = sequence
    if profile is not None:
        results["config"]["env"]["profile"] = profile
    other = tmp_path / name
    other.mkdir()
    (other / "results.json").write_text(json.dumps(results))
    return other


def test_other_runs_oracles_play_on_the_same_episodes(run_dir, tmp_path):
    all_solo = [["solo_process"] * 3] * 2
    solo_run = _other_seed(run_dir, tmp_path, "solo_seed", sequence=all_solo)
    same_run = _other_seed(run_dir, tmp_path, "same_seed")
    result = rescore_run.rescore(run_dir, EVAL_EPISODES, ["solo"], progress=False, oracles_of=[solo_run, same_run])
    name = f"oracle_fixed of {solo_run}"
    # the same sequence as the run's own oracle is played once; all solo is the solo baseline
    assert result["other_oracles"] == {name: all_solo}
    assert set(result["reward"]) == {"qmix", "oracle_fixed", name, "solo"}
    assert result["reward"][name] == result["reward"]["solo"]
    assert result["qmix_minus"][name] == result["qmix_minus"]["solo"]
    alone = rescore_run.rescore(run_dir, EVAL_EPISODES, [], progress=False)
    assert alone["reward"]["oracle_fixed"] == result["reward"]["oracle_fixed"]
    report = rescore_run.format_report(result)
    assert name in report and "solo_process,solo_process,solo_process / solo_process" in report


def test_other_runs_oracles_must_be_of_the_same_env(run_dir, tmp_path, capsys):
    other = _other_seed(run_dir, tmp_path, "aime_seed", profile="aime26")
    with pytest.raises(ConfigError, match="env.profile: 'mmlu_pro' against 'aime26'"):
        rescore_run.rescore(run_dir, EVAL_EPISODES, [], progress=False, oracles_of=[other])
    assert rescore_run.main([str(run_dir), "--episodes", "10", "--oracles-of", str(tmp_path / "gone"),
                             "--no-progress"]) == 2
    assert str(tmp_path / "gone") in capsys.readouterr().err


def test_actions_from_names_inverts_sequence_names():
    actions = np.array([[0, 1, 2], [3, 4, 5]])
    assert np.array_equal(actions_from_names(sequence_names(actions)), actions)
    with pytest.raises(ValueError, match="shout_loudly"):
        actions_from_names([["solo_process", "shout_loudly", "solo_process"]])


def test_bad_input_names_the_bad_value(run_dir, tmp_path, capsys):
    with pytest.raises(ConfigError, match="no results.json"):
        rescore_run.rescore(tmp_path, 10, [], progress=False)
    assert rescore_run.main([str(tmp_path), "--episodes", "10", "--no-progress"]) == 2
    assert str(tmp_path) in capsys.readouterr().err
    with pytest.raises(SystemExit):
        rescore_run.main([str(run_dir), "--baselines", "full,circle"])
    assert "circle" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        rescore_run.main([str(run_dir), "--episodes", "0"])
    assert "--episodes 0" in capsys.readouterr().err
