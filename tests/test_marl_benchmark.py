"""The MARL benchmark (studies/marl_benchmark.py) and BenchMARL's policies as controllers
(controllers/benchmarl_policy.py): the headroom share's arithmetic by hand, held-out play on the PettingZoo
env's episodes, a tiny on-policy and off-policy run written with every field and skipped when run again,
and a leaderboard controller that trains and plays a whole episode as its TorchRL policy plays it."""
from __future__ import annotations

import json
import sys
from dataclasses import replace

import numpy as np
import pytest
import torch
from tensordict.nn import TensorDictModule

pytest.importorskip("benchmarl")  # installs with `pip install --no-deps benchmarl` (README)

from controllers import benchmarl_policy  # noqa: E402
from controllers.base import play_episode, train_counted  # noqa: E402
from controllers.benchmarl_policy import algorithm_config, play_held_out  # noqa: E402
from controllers.registry import make_controller  # noqa: E402
from learners.evaluation import score_on_simulator  # noqa: E402
from studies import leaderboard, marl_benchmark  # noqa: E402
from topo_env.engine.config_checks import ConfigError  # noqa: E402
from topo_env.engine.seeding import held_out_seed  # noqa: E402
from topo_env.frontends.env_config import EnvConfig  # noqa: E402
from topo_env.frontends.orchestrator_env import OrchestratorEnv  # noqa: E402
from topo_env.frontends.parallel_env import TopologyParallelEnv  # noqa: E402
from topo_env.references.baselines import fixed_joint_action  # noqa: E402

CONFIG = EnvConfig.from_dict({"profile": "mmlu_pro", "rounds": 2, "embed_dim": 16})
TINY = {"on_policy_collected_frames_per_batch": 120, "on_policy_n_minibatch_iters": 1, "on_policy_minibatch_size": 60,
        "off_policy_collected_frames_per_batch": 120, "off_policy_n_optimizer_steps": 2,
        "off_policy_train_batch_size": 32}
"""One BenchMARL iteration of 120 frames (12 steps of its 10 env rows: 60 episodes), a few optimizer steps."""
EPISODES = 150


@pytest.fixture()
def tiny_batches(monkeypatch):
    """Every experiment built here collects and trains in tiny batches (BenchMARL's defaults otherwise)."""
    original = benchmarl_policy.experiment_config
    monkeypatch.setattr(benchmarl_policy, "experiment_config",
                        lambda frames, out_dir, loggers=True, changes=None: original(frames, out_dir, loggers, TINY))


def fake_references(config: EnvConfig, seed: int, episodes: int) -> dict[str, np.ndarray]:
    """The fixed baselines on the seed's held-out episodes, with ``best_fixed`` := solo and ``adaptive`` :=
    the best fixed baseline of each episode (the real references' first search takes minutes)."""
    _, rewards = score_on_simulator(TopologyParallelEnv(replace(config, split="eval")), episodes, held_out_seed(seed),
                                    progress=False, references=False)
    fixed = np.stack([rewards[name] for name in ("solo", "full", "chain", "star", "debate")])
    return {**rewards, "best_fixed": rewards["solo"], "adaptive": fixed.max(axis=0)}


def fixed_policy(name: str, n_agents: int = 3) -> TensorDictModule:
    """A TorchRL policy of the env's group that plays fixed baseline ``name``'s joint action every round."""
    joint = torch.as_tensor(fixed_joint_action(name, n_agents), dtype=torch.int64)
    return TensorDictModule(lambda mask: joint.expand(mask.shape[:-1]).clone(), in_keys=[("agent", "action_mask")],
                            out_keys=[("agent", "action")])


def test_headroom_share_and_paired_difference_by_hand():
    scores = {"reward": np.array([1.0, 0.8, 0.9]), "accuracy": np.array([1.0, 0.0, 1.0]),
              "team_tokens": np.array([100, 200, 300])}
    references = {"best_fixed": np.array([0.9, 0.8, 0.7]), "adaptive": np.array([1.0, 1.0, 1.0]),
                  "solo": np.array([0.9, 0.9, 0.9])}
    figures = marl_benchmark.held_out_figures(scores, references)
    # policy 0.9, best_fixed 0.8, adaptive 1.0: share (0.9 - 0.8) / (1.0 - 0.8) = 0.5
    assert figures["reward"] == pytest.approx(0.9) and figures["headroom"] == pytest.approx(0.2)
    assert figures["headroom_share"] == pytest.approx(0.5)
    # differences 0.1, 0.0, 0.2: mean 0.1, sample SD 0.1, SE 0.1 / sqrt(3)
    assert figures["minus_best_fixed"]["mean"] == pytest.approx(0.1)
    assert figures["minus_best_fixed"]["se"] == pytest.approx(0.1 / np.sqrt(3))
    assert figures["minus_solo"]["mean"] == pytest.approx(0.0, abs=1e-12)
    assert figures["accuracy"] == pytest.approx(2 / 3) and figures["tokens_per_task"] == pytest.approx(200)
    assert marl_benchmark.headroom_figures(0.9, 0.8, 0.8)["headroom_share"] is None  # no headroom: no share


def test_held_out_play_meets_the_pettingzoo_envs_episodes():
    """A fixed policy played through the vectorised TorchRL env, in chunks, scores what the batch-scored
    baseline scores on the PettingZoo env's episodes held_out_seed(seed) + k, episode by episode."""
    figures, rewards = score_on_simulator(TopologyParallelEnv(replace(CONFIG, split="eval")), 50, held_out_seed(1),
                                          progress=False, references=False)
    for name in ("solo", "star"):
        played = play_held_out(fixed_policy(name), CONFIG, seed=1, episodes=50, chunk=16)
        np.testing.assert_allclose(played["reward"], rewards[name], rtol=0, atol=1e-6)
        assert played["accuracy"].mean() == pytest.approx(figures[name]["accuracy"])
        assert played["team_tokens"].mean() == pytest.approx(figures[name]["tokens_per_task"])
    with pytest.raises(ValueError, match="episodes=0"):
        play_held_out(fixed_policy("solo"), CONFIG, seed=1, episodes=0)


def test_a_tiny_study_writes_every_field_and_skips_finished_runs(tmp_path, monkeypatch, tiny_batches):
    monkeypatch.setattr(leaderboard, "env_config", lambda profile, path: CONFIG)
    monkeypatch.setattr(marl_benchmark, "reference_rewards", fake_references)
    frames = {"mappo": 240, "iql": 120}
    lines = []
    assert marl_benchmark.benchmark(["mmlu_pro"], ["mappo", "iql"], [0], frames, EPISODES, tmp_path,
                                    say=lines.append) == []
    references = fake_references(CONFIG, 0, EPISODES)
    for algorithm in ("mappo", "iql"):
        path = tmp_path / "mmlu_pro" / f"benchmarl_{algorithm}_seed0.json"
        run = json.loads(path.read_text())
        assert set(marl_benchmark.RUN_KEYS) <= set(run)
        assert run["frames"] == frames[algorithm] and run["train_episodes"] == frames[algorithm] // 2
        assert run["episodes"] == EPISODES and run["held_out_seed"] == held_out_seed(0)
        assert [point[0] for point in run["curve"]] == list(range(120, frames[algorithm] + 1, 120))
        gap = references["adaptive"].mean() - references["solo"].mean()
        assert run["best_fixed"] == pytest.approx(references["solo"].mean())
        assert run["headroom_share"] == pytest.approx((run["reward"] - references["solo"].mean()) / gap)
        assert run["minus_best_fixed"]["mean"] == pytest.approx(run["reward"] - references["solo"].mean())
        assert 0 < run["accuracy"] < 1 and run["tokens_per_task"] > 0 and run["wall_seconds"] > run["train_seconds"]
        assert any(path.with_suffix("").rglob("*.csv"))  # BenchMARL's csv logs, next to the JSON
    assert any("benchmarl_iql seed 0: headroom share" in line for line in lines)
    before = {p: p.stat().st_mtime_ns for p in (tmp_path / "mmlu_pro").glob("*.json")}
    lines.clear()
    marl_benchmark.benchmark(["mmlu_pro"], ["mappo", "iql"], [0], frames, EPISODES, tmp_path, say=lines.append)
    assert lines == [f"mmlu_pro benchmarl_{a} seed 0: finished earlier, skipped" for a in ("mappo", "iql")]
    assert before == {p: p.stat().st_mtime_ns for p in before}
    with pytest.raises(ConfigError, match="was run with --frames 240"):
        marl_benchmark.benchmark(["mmlu_pro"], ["mappo"], [0], {"mappo": 480}, EPISODES, tmp_path)
    table = marl_benchmark.markdown_table(marl_benchmark.collect(tmp_path, ["mmlu_pro"], ["mappo", "iql"], [0]),
                                          EPISODES)
    row = next(line for line in table.splitlines() if "| benchmarl_mappo |" in line)
    assert f"0: {run['headroom_share']:.2f}" in table and "| 240 |" in row
    mappo = json.loads((tmp_path / "mmlu_pro" / "benchmarl_mappo_seed0.json").read_text())
    assert f"| {mappo['reward']:.4f} |" in row  # one seed: its figure, no SE over seeds in brackets
    two = marl_benchmark.aggregate([mappo, {**mappo, "seed": 1, "reward": mappo["reward"] + 0.02}])
    assert marl_benchmark._cell(two["reward"]) == f"{mappo['reward'] + 0.01:.4f} (0.0100)"


def test_a_missing_central_ppo_skips_its_rows_only(tmp_path, monkeypatch, tiny_batches):
    monkeypatch.setattr(leaderboard, "env_config", lambda profile, path: CONFIG)
    monkeypatch.setattr(marl_benchmark, "reference_rewards", fake_references)
    monkeypatch.setitem(sys.modules, "controllers.central_ppo", None)  # as if the module were not there
    lines = []
    failed = marl_benchmark.benchmark(["mmlu_pro"], ["ppo_central", "iql"], [0], {"ppo_central": 100, "iql": 120},
                                      20, tmp_path, say=lines.append)
    assert failed == [line for line in lines if "ppo_central" in line and "skipped, cannot import" in line]
    assert len(failed) == 1 and [p.name for p in (tmp_path / "mmlu_pro").glob("*.json")] == ["benchmarl_iql_seed0.json"]


def test_the_leaderboard_controller_trains_and_plays_as_its_policy(tiny_batches):
    built = make_controller("benchmarl_qmix", CONFIG, 0, None)
    assert built.train_episodes == benchmarl_policy.TRAIN_FRAMES["qmix"] // 2  # its 20-minute budget at T = 2
    spent = train_counted(built.controller, lambda mode: OrchestratorEnv(CONFIG, mode=mode), 60, 0)
    assert spent.episodes == 60  # 120 frames of T = 2
    env = OrchestratorEnv(CONFIG, mode="graph")
    played = play_held_out(built.controller.trained.policy, CONFIG, seed=0, episodes=4)
    for k in range(4):
        record = play_episode(env, built.controller, held_out_seed(0) + k, {"split": "eval"})
        assert record.rounds == 2 and record.calls > 0
        assert record.reward == pytest.approx(played["reward"][k], abs=1e-6)
        assert record.accuracy == played["accuracy"][k] and record.tokens == played["team_tokens"][k]


def test_bad_names_and_budgets_are_one_line_errors():
    with pytest.raises(ValueError, match=r"'maddpg': not one of \['mappo', 'ippo', 'qmix', 'vdn', 'iql', 'masac'\]"):
        algorithm_config("maddpg")
    with pytest.raises(ConfigError, match="no such controller"):
        make_controller("benchmarl_maddpg", CONFIG, 0, None)
    assert marl_benchmark.parse_frames(["1000", "masac=500"], ["mappo", "masac"]) == {"mappo": 1000, "masac": 500}
    with pytest.raises(ConfigError, match="--frames 'maddpg=5'"):
        marl_benchmark.parse_frames(["maddpg=5"], ["mappo"])
