"""The central-controller PPO (controllers/central_ppo.py): it learns where one graph is clearly best, the same
seed trains the same policy, GAE leaves the NEXT_STEP restart out, its greedy actions lie in the action space,
play_held_out meets the PettingZoo env's held-out episodes, and the leaderboard controller trains and plays."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from controllers.base import play_episode, train_counted
from controllers.central_ppo import (CentralPPOController, action_bits, bits_to_action, gae, play_held_out,
                                     train_central_ppo)
from controllers.registry import make_controller
from learners.evaluation import score_on_simulator
from topo_env.engine.seeding import held_out_seed
from topo_env.frontends.env_config import EnvConfig
from topo_env.frontends.orchestrator_env import OrchestratorEnv
from topo_env.frontends.orchestrator_vector_env import OrchestratorVectorEnv
from topo_env.frontends.parallel_env import TopologyParallelEnv

CONFIG = EnvConfig.from_dict({"profile": "mmlu_pro", "rounds": 2, "embed_dim": 16})
TOKENS_ONLY = replace(CONFIG, w_acc=0.0, w_tok=1.0)  # the empty graph is best: every call only costs
SMALL = {"num_envs": 64, "num_steps": 4}  # rollouts of 256 frames


class FixedGraph:
    """``act_batch`` of one fixed round for every row: no edges, ``active`` / ``verify`` / ``halt`` bits."""

    def __init__(self, active: int, verify: int, halt: int, n: int = 3):
        self.n, self.bits = n, np.r_[np.zeros(n * (n - 1)), np.full(n, active), np.full(n, verify), halt]

    def act_batch(self, obs):
        return bits_to_action(np.tile(self.bits, (len(obs["round"]), 1)), self.n)


@pytest.fixture(scope="module")
def trained():
    return train_central_ppo(TOKENS_ONLY, 0, 2048, **SMALL)


def test_ppo_learns_the_empty_graph_when_only_tokens_count(trained):
    empty = play_held_out(FixedGraph(0, 0, 1), TOKENS_ONLY, 3, 200)["reward"]
    before = play_held_out(CentralPPOController(TOKENS_ONLY, 0), TOKENS_ONLY, 3, 200)["reward"]
    after = play_held_out(trained, TOKENS_ONLY, 3, 200)["reward"]
    assert before.mean() < empty.mean() - 0.3  # the initial policy calls agents
    np.testing.assert_allclose(after, empty)  # the trained one calls nobody: the best return on every episode
    history = trained.history
    assert len(history) == 8 and history[-1]["frames"] == 2048 and trained.episodes_trained > 2048 // 3
    assert history[-1]["entropy"] < history[0]["entropy"] - 0.1  # the sampled policy moves towards it
    returns = [h["episodic_return"] for h in history]
    assert np.mean(returns[-2:]) > np.mean(returns[:2]) + 0.05


def test_the_same_seed_trains_the_same_policy(trained):
    again = train_central_ppo(TOKENS_ONLY, 0, 2048, **SMALL)
    for key, value in trained.state_dict()["policy"].items():
        assert torch.equal(value, again.state_dict()["policy"][key]), key
    timeless = [[{k: v for k, v in h.items() if k != "frames_per_second"} for h in c.history] for c in (trained, again)]
    assert timeless[0] == timeless[1]
    other = train_central_ppo(TOKENS_ONLY, 1, 256, **SMALL)
    assert not torch.equal(other.policy.actor[0].weight, trained.policy.actor[0].weight)


def test_gae_leaves_the_restart_step_out():
    """One row: an episode of two steps (rewards 0, 1), NEXT_STEP's restart step, then a step of the next
    episode (reward 100) that ends it. Nothing after the end reaches the first episode's advantages."""
    gamma, lam = 0.9, 0.8
    values = torch.tensor([[0.5], [0.25], [3.0], [2.0]])
    dones = torch.tensor([[0.0], [1.0], [0.0], [1.0]])
    valid = torch.tensor([[1.0], [1.0], [0.0], [1.0]])

    def advantages(later_reward, next_value):
        rewards = torch.tensor([[0.0], [1.0], [0.0], [later_reward]])
        return gae(rewards, values, dones, valid, torch.tensor([next_value]), gamma, lam)

    adv, returns = advantages(100.0, 7.0)
    first = 1.0 - 0.25
    np.testing.assert_allclose(adv[:, 0], [gamma * 0.25 - 0.5 + gamma * lam * first, first, 0.0, 98.0], rtol=1e-6)
    assert returns[2, 0] == 0.0 and returns[3, 0] == 100.0
    other, _ = advantages(-5.0, -40.0)
    assert torch.equal(other[:2], adv[:2])


def test_greedy_actions_lie_in_the_action_spaces():
    controller = CentralPPOController(CONFIG, 2)
    envs = OrchestratorVectorEnv(8, CONFIG)
    obs, _ = envs.reset(seed=0)
    for _ in range(3):  # rounds 0 and 1, then rows restarting
        action = controller.act_batch(obs)
        assert envs.action_space.contains(action)
        obs, *_ = envs.step(action)
    env = OrchestratorEnv(CONFIG)
    observation, info = env.reset(seed=0)
    assert env.action_space.contains(controller.act(observation, info))
    assert action_bits(3) == 13


def test_play_held_out_meets_the_solo_baselines_episodes():
    """Everyone active, no edges, no verifier, no halt is the solo baseline: the same per-episode rewards as
    the batch simulator's solo on the PettingZoo env's held-out seeds (in chunks smaller than the run)."""
    scores = play_held_out(FixedGraph(1, 0, 0), CONFIG, 1, 50, chunk=32)
    figures, rewards = score_on_simulator(TopologyParallelEnv(replace(CONFIG, split="eval")), 50, held_out_seed(1),
                                          progress=False, references=False)
    np.testing.assert_allclose(scores["reward"], rewards["solo"])
    assert scores["accuracy"].mean() == pytest.approx(figures["solo"]["accuracy"])
    assert scores["team_tokens"].mean() == pytest.approx(figures["solo"]["tokens_per_task"])


def test_leaderboard_controller_trains_on_the_simulated_team_and_plays_an_episode():
    controller, cfg, budget, _ = make_controller("ppo_central", CONFIG, 0, None)
    assert budget > 0 and controller.name == "ppo_central" and controller.mode == "graph"
    spent = train_counted(controller, lambda mode: OrchestratorEnv(cfg, mode=mode), 30, 0)
    assert controller.frames_trained == 2048 and spent.episodes == controller.episodes_trained > 600
    record = play_episode(OrchestratorEnv(cfg), controller, held_out_seed(0), {"split": "eval"})
    assert record.reward == pytest.approx(play_held_out(controller, cfg, 0, 1)["reward"][0])
    copy = CentralPPOController(cfg, 5)
    copy.load_state_dict(controller.state_dict())
    assert record == play_episode(OrchestratorEnv(cfg), copy, held_out_seed(0), {"split": "eval"})


def test_an_llm_team_is_a_one_line_error():
    llm = EnvConfig.from_dict({"domain": "code", "backend": {"kind": "llm", "model": "m", "dataset": "humaneval"}})
    with pytest.raises(ValueError, match="simulated team") as err:
        CentralPPOController(llm, 0).train(None, 10, 0)
    assert len(str(err.value).splitlines()) == 1


@pytest.mark.parametrize("hyper, frames, names", [
    ({"learning_rate": -1.0}, 100, "learning_rate=-1.0"), ({"num_envs": 0}, 100, "num_envs=0"),
    ({"clip": 0.2}, 100, "unknown central ppo config key 'clip'"), ({"target_kl": 0}, 100, "target_kl=0"),
    ({"num_envs": 2, "num_steps": 1, "num_minibatches": 4}, 100, "num_minibatches=4"),
    ({}, 0, "frames=0"), ({"gamma": 1.5}, 100, "gamma=1.5"), ({"anneal_lr": 1}, 100, "anneal_lr=1")])
def test_bad_settings_are_one_line_errors(hyper, frames, names):
    with pytest.raises(ValueError) as err:
        train_central_ppo(CONFIG, 0, frames, **hyper)
    assert names in str(err.value) and len(str(err.value).splitlines()) == 1
