"""The controller interface (controllers/base.py), per-agent policies through the orchestrator env
(controllers/per_agent.py, controllers/qmix.py) and the leaderboard (studies/leaderboard.py)."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from run_checks import ONE_EPISODE_CONFIG

from controllers.base import (CallCounter, Controller, TrainingSpend, graph_action, play_episode, train_counted,
                              train_seed)
from controllers.per_agent import build_baseline, observation_builder
from controllers.qmix import QMIXController
from learners.agent_network import AgentQNetwork
from learners.evaluation import QMIXPolicy
from topo_env.frontends.comm_actions import N_ACTIONS
from topo_env.references.baselines import make_baseline
from topo_env.frontends.env_config import EnvConfig
from topo_env.frontends.parallel_env import TopologyParallelEnv
from studies.leaderboard import format_leaderboard, leaderboard, main as leaderboard_main
from topo_env.frontends.orchestrator_env import OrchestratorEnv

CONFIG = EnvConfig.from_dict({"profile": "mmlu_pro", "rounds": 2, "embed_dim": 32})


def pettingzoo_episodes(policy, config: EnvConfig, seeds) -> list[tuple[float, int, float, list]]:
    """(return, team tokens, accuracy, observations per round) of ``policy`` on the PettingZoo env."""
    env = TopologyParallelEnv(config)
    out = []
    for seed in seeds:
        observations, infos = env.reset(seed=seed, options={"split": "eval"})
        policy.reset(seed)
        ret, seen = 0.0, []
        while env.agents:
            seen.append(np.stack([observations[a]["observation"] for a in sorted(observations)]))
            observations, rewards, _, _, infos = env.step(policy.act(observations, infos))
            ret += rewards["agent_0"]
        out.append((ret, env.episode.team_tokens, env.episode.accuracy, seen))
    return out


class RecordingController(Controller):
    """Wraps a CommActionController and keeps the observations it rebuilt for each round."""

    def __init__(self, inner):
        self.inner, self.mode, self.name, self.seen = inner, inner.mode, inner.name, []

    def begin(self, observation, info):
        self.inner.begin(observation, info)

    def act(self, observation, info):
        self.seen.append(self.inner.builder.agent_observations(observation["task"], observation["agents"],
                                                               int(observation["round"]), self.inner._previous))
        return self.inner.act(observation, info)


@pytest.mark.parametrize("name", ["solo", "full", "chain", "star", "debate"])
def test_fixed_baselines_play_the_same_episodes_through_either_front_end(name):
    seeds = range(12)
    expected = pettingzoo_episodes(make_baseline(name, roles=CONFIG.roles), CONFIG, seeds)
    env = OrchestratorEnv(CONFIG)
    controller = RecordingController(build_baseline(name, CONFIG))
    for seed, (ret, tokens, accuracy, observations) in zip(seeds, expected):
        controller.seen = []
        record = play_episode(env, controller, seed, {"split": "eval"})
        assert (record.reward, record.tokens, record.accuracy) == (pytest.approx(ret, abs=1e-12), tokens, accuracy)
        np.testing.assert_array_equal(np.stack(controller.seen), np.stack(observations))


def test_qmix_network_plays_the_same_episodes_through_either_front_end():
    torch.manual_seed(3)
    builder = observation_builder(CONFIG)
    agent = AgentQNetwork(builder.dim, N_ACTIONS, hidden_dim=16, dueling=True).eval()
    with torch.no_grad():  # large weights: actions that depend on the task and the first round's outputs
        for p in agent.parameters():
            p.mul_(6.0)
    seeds = range(15)
    expected = pettingzoo_episodes(QMIXPolicy(agent), CONFIG, seeds)
    controller = QMIXController(CONFIG, agent=agent)
    env = OrchestratorEnv(CONFIG)
    records = [play_episode(env, controller, seed, {"split": "eval"}) for seed in seeds]
    assert [(r.reward, r.tokens) for r in records] == [(pytest.approx(e[0], abs=1e-12), e[1]) for e in expected]
    assert len({round(r.density, 3) for r in records}) > 1  # the network's graphs vary: not one fixed topology


def test_untrained_qmix_plays_a_network_initialised_from_its_seed():
    env = OrchestratorEnv(CONFIG)

    def played(seed):
        controller = QMIXController(CONFIG, seed=seed)
        return [play_episode(env, controller, k, {"split": "eval"}).tokens for k in range(6)]

    assert played(0) == played(0)
    first = QMIXController(CONFIG, seed=0).policy.agent.state_dict()
    other = QMIXController(CONFIG, seed=1).policy.agent.state_dict()
    assert any(not torch.equal(first[k], other[k]) for k in first)


def test_call_counter_counts_agent_calls_and_the_decision_node():
    env = CallCounter(OrchestratorEnv(CONFIG))
    records = [play_episode(env, build_baseline(name, CONFIG), seed, {"split": "train"})
               for seed, name in enumerate(["full", "chain", "solo"])]
    # full: 3 agents x 2 phases (draft, revise in the cycle) x 2 rounds + decision; chain and solo: 3 x 2 + 1
    assert [r.calls for r in records] == [13, 7, 7]
    assert env.report == TrainingSpend(episodes=3, calls=27, tokens=sum(r.tokens for r in records))


class CountingLearner(Controller):
    """A toy trainable controller: plays full graphs on the training episodes it is given."""

    trainable = True

    def act(self, observation, info):
        return graph_action(3, 1 - np.eye(3))

    def train(self, env, episodes, seed, progress=False):
        for k in range(episodes):
            play_episode(env, self, train_seed(seed, k), {"split": "train"})
        return TrainingSpend(episodes=999)  # what a controller says is not what the leaderboard reports


def test_train_counted_reports_what_the_env_saw():
    spent = train_counted(CountingLearner(), lambda mode: OrchestratorEnv(CONFIG, mode=mode), 4, seed=0)
    assert (spent.episodes, spent.calls) == (4, 4 * 13)
    assert train_counted(CountingLearner(), lambda mode: OrchestratorEnv(CONFIG, mode=mode), 0, seed=0) == TrainingSpend()


def test_recall_shows_an_earlier_output_and_drops_missing_ones():
    env = OrchestratorEnv(CONFIG)
    env.reset(seed=0, options={"split": "eval"})
    _, _, _, _, info = env.step(graph_action(3, active=[1, 0, 0]))  # only agent 0 speaks
    assert info["outputs"][0] is not None and info["outputs"][1] is None
    recall = np.zeros((3, 3))
    recall[0, 2] = recall[1, 2] = 1  # agent 2 recalls 0 (spoke) and 1 (never spoke: dropped)
    _, _, _, _, info = env.step(graph_action(3, recall=recall))
    assert info["calls"].tolist() == [0, 0, 1]  # the receiver is called even though its active bit is 0
    assert env.episode.history[-1].spec.recall[:, 2].tolist() == [True, False, False]
    assert info["in_degree"].tolist() == [0, 0, 1] and info["outputs"][2]["answer"] is not None


def test_leaderboard_scores_every_method_on_the_same_episodes(tmp_path, capsys):
    result = leaderboard("mmlu_pro", ["solo", "full", "random"], seeds=[0, 1], episodes=30, adversary="random",
                         config_path=None, out_dir=tmp_path, train_episodes={}, progress=False)
    solo, full, rand = (result["methods"][m] for m in ("solo", "full", "random"))
    # the fixed topologies are deterministic and meet the same held-out episodes on every seed
    for m in (solo, full):
        assert m["accuracy"]["se"] == 0.0 and m["tokens_per_task"]["se"] == 0.0
    assert full["calls_per_task"]["mean"] == 13.0 and solo["density"]["mean"] == 0.0
    assert rand["accuracy"]["se"] > 0.0  # the random baseline draws per seed
    # the drop is clean minus attacked on the same episodes
    run = full["seeds"]["0"]
    config = EnvConfig.from_dict({**result["env"], "adversary_position": "random", "n_adversaries": 1})
    accuracy = np.mean([play_episode(OrchestratorEnv(config), build_baseline("full", config), k,
                                     {"split": "eval"}).accuracy for k in range(30)])
    assert run["drop"] == pytest.approx(run["accuracy"] - accuracy)
    assert 0.0 < full["drop"]["mean"] < 1.0
    assert full["adversary_out_degree"]["mean"] == pytest.approx(2.0)
    assert solo["reward_minus_reference"] == {"mean": 0.0, "se": 0.0} and result["reference"] == "solo"
    versus = full["reward_minus_reference"]
    assert versus["mean"] == pytest.approx(full["reward"]["mean"] - solo["reward"]["mean"]) and versus["se"] > 0
    table = format_leaderboard(result)
    assert table.splitlines()[3].split()[0] in {"solo", "full", "random"} and "simulated team" in table


def test_leaderboard_command_writes_json_and_picture(tmp_path, capsys):
    assert leaderboard_main(["--profile", "mmlu_pro", "--methods", "solo", "chain", "--seeds", "0", "--episodes", "5",
                             "--out", str(tmp_path), "--no-progress", "--json"]) == 0
    out = capsys.readouterr().out
    saved = json.loads((tmp_path / "leaderboard.json").read_text())
    assert set(saved["methods"]) == {"solo", "chain"} and saved["episodes"] == 5
    assert (tmp_path / "pareto.png").stat().st_size > 1000
    assert "leaderboard: profile mmlu_pro" in out and '"methods"' in out


def test_leaderboard_trains_qmix_for_the_default_recipes_td_episodes():
    from learners.config import DEFAULT_CONFIG, load_experiment
    from controllers import qmix

    assert qmix.TRAIN_EPISODES == load_experiment(DEFAULT_CONFIG).train.episodes


def test_leaderboard_trains_qmix_with_train_qmix(tmp_path, monkeypatch):
    import learners.config
    # a small one-episode run: the config the QMIX controller reads (controllers/qmix.py) for its network and training
    monkeypatch.setattr(learners.config, "DEFAULT_CONFIG", ONE_EPISODE_CONFIG)
    result = leaderboard("mmlu_pro", ["qmix"], seeds=[0], episodes=10, adversary="none", config_path=None,
                         out_dir=tmp_path, train_episodes={"qmix": 40}, progress=False)
    run = result["methods"]["qmix"]["seeds"]["0"]
    saved = torch.load(tmp_path / "qmix_seed0" / "checkpoint.pt", weights_only=False)
    extra = saved["simulator_episodes_spent"]  # noise samples, the teacher's search and demonstrations
    sim_scale = saved["config"]["sim_scale"]
    assert extra == 40 * sim_scale["noise_samples"] * saved["config"]["env"]["rounds"] + (
        sim_scale["teacher_episodes"] + 24_000 if sim_scale["teacher_episodes"] else 0)
    assert saved["episode"] == 40 and run["train_sim_episodes"] == 40 + extra  # a simulated team: no LLM calls
    assert run["train_llm_calls"] == 0


def test_leaderboard_in_flight_scores_the_sequential_episodes(tmp_path, monkeypatch):
    """K = 4 held-out episodes at once on a team whose calls take random times: the episodes
    complete out of order, and every deterministic method's figures equal the sequential run's."""
    import random

    import topo_env.frontends.orchestrator_env as orchestrator_module
    from run_checks import DelayedBackend

    finished, delays = [], random.Random(5)
    monkeypatch.setattr(orchestrator_module, "make_backend", lambda config: DelayedBackend(config, delays, finished))
    methods = ["solo", "chain", "dytopo", "agentconductor"]
    runs = [leaderboard("mmlu_pro", methods, seeds=[0], episodes=12, adversary="random", config_path=None,
                        out_dir=tmp_path / f"k{k}", train_episodes={"agentconductor": 0}, progress=False, in_flight=k)
            for k in (1, 4)]
    sequential, in_flight = (r["methods"] for r in runs)
    for name in methods:
        a, b = (dict(r[name]["seeds"]["0"], train_seconds=0) for r in (in_flight, sequential))
        assert a == b, name
    tasks = len(finished) // 2  # the sequential run's decisions, then the in-flight run's
    assert finished[:tasks] != finished[tasks:] and sorted(finished[:tasks]) == sorted(finished[tasks:])


def test_leaderboard_names_a_missing_extra_in_one_line(tmp_path, monkeypatch, capsys):
    import controllers.dytopo
    from topo_env.engine.cli import run_main

    def missing(name, dim=None):
        raise ImportError("MiniLMEncoder needs 'sentence-transformers'; install it with: pip install 'topomarl[minilm]'")

    monkeypatch.setattr(controllers.dytopo, "make_encoder", missing)
    argv = ["--profile", "mmlu_pro", "--methods", "dytopo", "--seeds", "0", "--episodes", "1", "--out", str(tmp_path),
            "--no-progress"]
    with pytest.raises(SystemExit) as stopped:
        run_main(lambda: leaderboard_main(argv), "leaderboard")
    err = capsys.readouterr().err.strip()
    assert stopped.value.code == 2 and len(err.splitlines()) == 1
    assert "'dytopo'" in err and "pip install 'topomarl[minilm]'" in err
