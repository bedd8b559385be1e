"""Tests for controllers.puppeteer: Eq. 6's step cost and returns, the REINFORCE loss, graph
folding, stop handling, config validation, training and played episodes."""
from __future__ import annotations

import logging
import math

import gymnasium
import numpy as np
import pytest
import torch
from gymnasium import spaces

from controllers import puppeteer as pp
from controllers.base import play_episode
from topo_env.frontends.orchestrator_env import orchestrator_env

torch.set_num_threads(1)


class ScriptedEnv(gymnasium.Env):
    """A next_agent env stub: fixed observations; step k spends ``step_tokens[k]`` team tokens;
    the episode ends on stop, at the step cap, or (``bandit``) after the first action, and its
    accuracy is ``1`` iff the first action was agent 0 (bandit) or ``accuracy``."""

    mode = "next_agent"

    def __init__(self, n_agents=2, step_tokens=(1000, 2000, 500), accuracy=1.0, bandit=False):
        self.n, self.step_tokens, self.accuracy, self.bandit = n_agents, list(step_tokens), accuracy, bandit
        self.action_space = spaces.Discrete(n_agents + 1)
        self.observation_space = spaces.Dict({})

    def _obs(self):
        task = np.zeros(4, dtype=np.float32)
        task[self.t % 4] = 1.0
        return {"task": task, "agents": np.zeros((self.n, 3), dtype=np.float32), "round": self.t}

    def _info(self, acc=0.0):
        return {"team_tokens": self.tokens, "accuracy": acc, "calls": np.zeros(self.n, dtype=np.int64),
                "outputs": [None] * self.n}

    def reset(self, *, seed=None, options=None):
        self.t, self.tokens = 0, 0
        return self._obs(), self._info()

    def step(self, action):
        self.tokens += self.step_tokens[self.t]
        self.t += 1
        if self.bandit:
            acc = 1.0 if int(action) == 0 else 0.0
            return self._obs(), acc, True, False, self._info(acc)
        done = int(action) == self.n or self.t == len(self.step_tokens)
        acc = self.accuracy if done else 0.0
        return self._obs(), acc if done else 0.0, done, False, self._info(acc)


def force_action(controller, action: int):
    """Make the controller's policy put (almost) all mass on ``action``."""
    last = controller.policy.layers[-1]
    with torch.no_grad():
        last.weight.zero_()
        last.bias.fill_(-50.0)
        last.bias[action] = 50.0


# -- Eq. 6 ------------------------------------------------------------------------------------
def test_step_cost_is_F_log_1_plus_t_over_phi():
    assert pp.step_cost(0.5, 2, 4) == pytest.approx(0.5 * math.log(1.5))
    assert pp.step_cost(0.5, 2, 4) == pytest.approx(0.2027325540540822, abs=1e-15)
    assert pp.step_cost(0.3, 0, 4) == 0.0
    assert pp.step_cost(0.1, 4, 4) == pytest.approx(0.1 * math.log(2.0))


def test_discounted_cost_aware_returns_on_a_hand_made_trajectory():
    # R_3 = 1 - 0.1 * 0.3 = 0.97; R_2 = 0.9 * 0.97 - 0.02 = 0.853; R_1 = 0.9 * 0.853 - 0.01 = 0.7577
    assert pp.discounted_returns([0.1, 0.2, 0.3], r=1.0, lam=0.1, gamma=0.9) == pytest.approx([0.7577, 0.853, 0.97])
    # a failed task: R_2 = 0 - 0.05 = -0.05, R_1 = 0.99 * -0.05 - 0.1 * 0.4 = -0.0895
    assert pp.discounted_returns([0.4, 0.5], r=0.0, lam=0.1, gamma=0.99) == pytest.approx([-0.0895, -0.05])
    assert pp.discounted_returns([2.0], r=1.0, lam=0.1, gamma=0.99) == pytest.approx([0.8])
    assert pp.discounted_returns([], r=1.0, lam=0.1, gamma=0.99) == []


def test_training_episode_charges_each_steps_tokens_with_the_step_cost():
    env = ScriptedEnv(n_agents=2, step_tokens=(1000, 2000, 500), accuracy=1.0)
    ctrl = pp.build(2, 3, seed=0, config={"token_scale": 10000, "phi": 4})
    ctrl.policy = None
    ctrl._ensure_policy(4 + 6 + 64 + 1)
    force_action(ctrl, 0)  # never stop: the cap (3 steps) ends it
    ctrl.play_training_episode(env, seed=0)
    c = [0.1 * math.log(1.25), 0.2 * math.log(1.5), 0.05 * math.log(1.75)]
    assert ctrl.last_sequence == [0, 0, 0]
    assert ctrl.last_costs == pytest.approx(c)
    r3 = 1.0 - 0.1 * c[2]
    r2 = 0.99 * r3 - 0.1 * c[1]
    r1 = 0.99 * r2 - 0.1 * c[0]
    assert ctrl.last_returns == pytest.approx([r1, r2, r3])
    assert ctrl.last_returns == pytest.approx([0.9670980, 0.9791206, 0.9972019], abs=1e-6)


def test_terminal_reward_is_accuracy_by_default_and_the_env_return_on_request():
    info = {"accuracy": 1.0}
    assert pp.build(3, 4, 0).terminal_reward(1.2, info) == 1.0
    assert pp.build(3, 4, 0, {"terminal_reward": "env"}).terminal_reward(1.2, info) == 1.2


# -- REINFORCE --------------------------------------------------------------------------------
def test_reinforce_gradient_raises_the_log_prob_of_a_positively_rewarded_action():
    logits = torch.zeros(3, requires_grad=True)
    dist = torch.distributions.Categorical(logits=logits)
    action = torch.tensor(0)
    loss = pp.reinforce_loss(dist.log_prob(action).reshape(1), torch.tensor([1.0]), dist.entropy().reshape(1), 0.0)
    assert loss.item() == pytest.approx(math.log(3.0))
    loss.backward()
    # d(-R log softmax(z)_0)/dz = -R (onehot_0 - p) = [-2/3, 1/3, 1/3]: descent raises z_0
    assert logits.grad.tolist() == pytest.approx([-2 / 3, 1 / 3, 1 / 3])

    logits.grad = None
    dist = torch.distributions.Categorical(logits=logits)
    pp.reinforce_loss(dist.log_prob(action).reshape(1), torch.tensor([-1.0]), dist.entropy().reshape(1),
                      0.0).backward()
    assert logits.grad.tolist() == pytest.approx([2 / 3, -1 / 3, -1 / 3])


def test_reinforce_loss_entropy_bonus_and_averaging():
    log_probs = torch.tensor([-1.0, -2.0])
    returns = torch.tensor([0.5, 1.0])
    entropies = torch.tensor([0.3, 0.7])
    # -(-0.5 - 2.0 + 0.1 * 1.0) / 2 = 1.2
    assert pp.reinforce_loss(log_probs, returns, entropies, 0.1, n_episodes=2).item() == pytest.approx(1.2)
    # the entropy bonus pushes a peaked policy back towards uniform
    logits = torch.tensor([2.0, 0.0, 0.0], requires_grad=True)
    dist = torch.distributions.Categorical(logits=logits)
    pp.reinforce_loss(torch.zeros(1), torch.zeros(1), dist.entropy().reshape(1), 1.0).backward()
    assert logits.grad[0] > 0 and logits.grad[1] < 0


# -- graph folding -----------------------------------------------------------------------------
@pytest.mark.parametrize("sequence, edges, density, cycles", [
    ([0, 1, 0, 2], {(0, 1), (1, 0), (0, 2)}, 0.5, 1),  # 0 <-> 1
    ([0, 0, 1, 3, 2], {(0, 0), (0, 1)}, 1 / 6, 1),  # stop (3) ends it; the self-loop is a cycle
    ([1, 2, 0, 1, 2, 0], {(1, 2), (2, 0), (0, 1)}, 0.5, 1),  # one 3-cycle
    ([0, 1, 2, 1, 0, 2, 0], {(0, 1), (1, 2), (2, 1), (1, 0), (0, 2), (2, 0)}, 1.0, 5),  # 3 two- + 2 three-cycles
    ([2, 1, 0], {(2, 1), (1, 0)}, 1 / 3, 0),  # a chain
    ([1], set(), 0.0, 0),
    ([3], set(), 0.0, 0),
    ([], set(), 0.0, 0),
])
def test_folding_and_cycle_counts(sequence, edges, density, cycles):
    graph = pp.folded_graph(sequence, 3)
    assert set(graph.nodes) == {0, 1, 2}
    assert set(graph.edges) == edges
    assert pp.fold_metrics(sequence, 3) == (pytest.approx(density), cycles)


# -- acting -----------------------------------------------------------------------------------
def test_stop_ends_the_episode_before_anyone_speaks():
    env = orchestrator_env(mode="next_agent", profile="mmlu_pro", rounds=pp.ENV_ROUNDS)
    ctrl = pp.build(3, pp.ENV_ROUNDS, seed=0)
    obs, info = env.reset(seed=0, options={"split": "eval"})
    ctrl.begin(obs, info)
    ctrl.act(obs, info)  # builds the policy
    force_action(ctrl, 3)
    record = play_episode(env, ctrl, seed=0, options={"split": "eval"})
    assert ctrl.last_sequence == [3]
    assert (record.rounds, record.calls, record.accuracy) == (0, 1, 0.0)
    assert ctrl.last_fold() == (0.0, 0)


def test_the_step_cap_ends_an_episode_that_never_stops():
    env = orchestrator_env(mode="next_agent", profile="mmlu_pro", rounds=pp.ENV_ROUNDS)
    ctrl = pp.build(3, pp.ENV_ROUNDS, seed=0)
    obs, info = env.reset(seed=0, options={"split": "eval"})
    ctrl.act(obs, info)
    force_action(ctrl, 1)
    record = play_episode(env, ctrl, seed=0, options={"split": "eval"})
    assert ctrl.last_sequence == [1, 1, 1, 1]
    assert (record.rounds, record.calls) == (4, 5)
    assert ctrl.last_fold() == (0.0, 1)  # 1 -> 1 self-loop


def test_state_vector_layout_and_malformed_outputs_are_logged(caplog):
    ctrl = pp.build(2, 4, seed=0, config={"outputs_embed_dim": 16})
    obs = {"task": np.arange(3, dtype=np.float32), "agents": np.ones((2, 2), dtype=np.float32)}
    info = {"outputs": [{"text": "answer: B"}, "garbage"]}
    with caplog.at_level(logging.WARNING, logger="controllers.puppeteer"):
        state = ctrl.state_vector(obs, info, step=2)
    assert "outputs'][1]" in caplog.text
    assert state.shape == (3 + 4 + 16 + 1,)
    assert state[:7].tolist() == [0, 1, 2, 1, 1, 1, 1]
    assert state[-1] == pytest.approx(0.5)  # step 2 of phi = 4
    assert np.linalg.norm(state[7:23]) == pytest.approx(1.0)  # hashed embedding of "answer: B"
    assert ctrl.outputs_text(info) == "answer: B"
    assert not np.any(ctrl.state_vector(obs, {"outputs": [None, None]}, 0)[7:23])


def test_non_finite_policy_falls_back_to_a_random_action(caplog):
    env = ScriptedEnv()
    ctrl = pp.build(2, 3, seed=0)
    obs, info = env.reset()
    ctrl.act(obs, info)
    with torch.no_grad():
        ctrl.policy.layers[-1].bias.fill_(float("nan"))
    with caplog.at_level(logging.WARNING, logger="controllers.puppeteer"):
        action = ctrl.act(obs, info)
    assert 0 <= action <= 2 and "not finite" in caplog.text


# -- config -----------------------------------------------------------------------------------
def test_config_defaults_follow_the_paper():
    cfg = pp.PuppeteerConfig.from_dict(None)
    assert (cfg.lam, cfg.gamma, cfg.lr, cfg.episodes_per_update, cfg.hidden) == (0.1, 0.99, 1e-4, 1, (512, 128, 32))
    assert pp.ENV_ROUNDS == 4
    assert pp.build(3, 4, 0).phi == 4.0


@pytest.mark.parametrize("bad, key", [
    ({"lamda": 0.1}, "lamda"), ({"gamma": 0.0}, "gamma"), ({"gamma": 1.5}, "gamma"), ({"lr": -1}, "lr"),
    ({"phi": 0}, "phi"), ({"phi": 2.5}, "phi"), ({"terminal_reward": "bleu"}, "terminal_reward"),
    ({"eval_policy": "argmax"}, "eval_policy"), ({"hidden": []}, "hidden"), ({"hidden": [8, 0]}, "hidden"),
    ({"token_scale": 0}, "token_scale"), ({"entropy_coef": float("nan")}, "entropy_coef"), ({"lam": True}, "lam"),
])
def test_config_rejects_bad_keys_and_values(bad, key):
    with pytest.raises(ValueError, match=key):
        pp.PuppeteerConfig.from_dict(bad)


# -- training and playing ---------------------------------------------------------------------
def test_training_learns_the_rewarded_agent_on_a_bandit():
    env = ScriptedEnv(n_agents=2, step_tokens=(100,), bandit=True)
    ctrl = pp.build(2, 1, seed=3, config={"lr": 3e-3, "hidden": [16]})
    obs, info = env.reset()
    state = ctrl.state_vector(obs, info, 0)
    before = ctrl.distribution(state).probs.detach().numpy()
    ctrl.train(env, 300, seed=0)
    after = ctrl.distribution(state).probs.detach().numpy()
    assert after[0] > 0.9 > before[0]


def test_training_is_reproducible_and_changes_the_policy():
    def trained(seed):
        env = orchestrator_env(mode="next_agent", profile="mmlu_pro", rounds=pp.ENV_ROUNDS)
        ctrl = pp.build(3, pp.ENV_ROUNDS, seed=seed, config={"hidden": [32, 16]})
        obs, info = env.reset(seed=0, options={"split": "eval"})
        ctrl.act(obs, info)
        initial = ctrl.state_dict()
        report = ctrl.train(env, 40, seed=seed)
        assert report.episodes == 40
        return initial, ctrl.state_dict()

    init_a, a = trained(0)
    _, b = trained(0)
    _, c = trained(1)
    for name, tensor in a["policy"].items():
        assert torch.equal(tensor, b["policy"][name])
    assert any(not torch.equal(t, init_a["policy"][k]) for k, t in a["policy"].items())
    assert any(not torch.equal(t, c["policy"][k]) for k, t in a["policy"].items())

    restored = pp.build(3, pp.ENV_ROUNDS, seed=9, config={"hidden": [32, 16]})
    restored.load_state_dict(a)
    for name, tensor in restored.state_dict()["policy"].items():
        assert torch.equal(tensor, a["policy"][name])


def test_plays_episodes_on_the_simulated_team_reproducibly():
    def play(seed):
        env = orchestrator_env(mode="next_agent", profile="mmlu_pro", rounds=pp.ENV_ROUNDS)
        ctrl = pp.build(3, pp.ENV_ROUNDS, seed=seed)
        out = []
        for k in range(4):
            record = play_episode(env, ctrl, seed=k, options={"split": "eval"})
            out.append((record, list(ctrl.last_sequence), ctrl.last_fold()))
        return out

    first, again = play(5), play(5)
    assert [(r.reward, s) for r, s, _ in first] == [(r.reward, s) for r, s, _ in again]
    for record, sequence, (density, cycles) in first:
        spoke = [a for a in sequence if a < 3]
        assert 1 <= len(sequence) <= pp.ENV_ROUNDS
        assert all(a == 3 for a in sequence[len(spoke):]) and len(sequence) - len(spoke) <= 1
        assert record.rounds == len(spoke) and record.calls == len(spoke) + 1
        assert record.accuracy in (0.0, 1.0) and record.tokens > 0
        assert 0.0 <= density <= 1.0 and cycles >= 0
