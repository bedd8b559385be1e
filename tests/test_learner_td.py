"""Tests for QMIX learning: TD targets (one-step and TD(lambda)), masked argmax, the loss,
the state the mixer sees, target syncing, and the episode runner (greedy determinism,
eval mode during rollouts, pre-action states)."""
from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from learners.agent_network import AgentQNetwork
from learners.config import QMIXConfig
from learners.learner import QMIXLearner, masked_argmax, td_targets
from learners.runner import EpisodeRunner, select_actions
from topo_env.frontends.comm_actions import N_ACTIONS
from topo_env.frontends.env_config import EnvConfig
from topo_env.frontends.parallel_env import TopologyParallelEnv

torch.set_num_threads(1)

N, T, D, S, A = 3, 2, 5, 4, N_ACTIONS
GAMMA = 0.9
SMALL = dict(hidden_dim=8, mixer_embed_dim=8, hypernet_dim=8, gamma=GAMMA, batch_size=2)


def make_learner(seed: int = 0, perturb_targets: bool = True, return_targets: bool = False,
                 **overrides) -> QMIXLearner:
    torch.manual_seed(seed)
    cfg = QMIXConfig(**{**SMALL, **overrides})
    learner = QMIXLearner(D, S, N, A, cfg, torch.device("cpu"), return_targets=return_targets)
    if perturb_targets:  # targets != online, so that double Q and plain Q bootstrap differently
        with torch.no_grad():
            for p in list(learner.target_agent.parameters()) + list(learner.target_mixer.parameters()):
                p.add_(0.5 * torch.randn_like(p))
    return learner


def episode_batch(rewards=(0.0, 1.5), b: int = 1, t: int = T, seed: int = 0, mask: np.ndarray | None = None) -> dict:
    """B hand-made episodes of t rounds; state[t] carries the round index so that rounds differ."""
    rng = np.random.default_rng(seed)
    adjacency = np.zeros((b, t, N, N), np.float32)
    for k in range(1, t):
        adjacency[:, k] = (rng.random((b, N, N)) < 0.5) * (1 - np.eye(N))
    state = rng.normal(size=(b, t, S)).astype(np.float32)
    state[..., 0] = np.arange(t)
    terminated = np.zeros((b, t), bool)
    terminated[:, -1] = True
    return {
        "obs": rng.normal(size=(b, t, N, D)).astype(np.float32),
        "state": state,
        "adjacency": adjacency.astype(np.float32),
        "mask": np.ones((b, t, N, A), bool) if mask is None else mask,
        "actions": rng.integers(A, size=(b, t, N)).astype(np.int64),
        "reward": np.tile(np.asarray(rewards, np.float32), (b, 1)),
        "terminated": terminated,
    }


def stepped_q(net: AgentQNetwork, obs: torch.Tensor, adj: torch.Tensor) -> list[torch.Tensor]:
    """Q-values of one episode (batch index 0), stepping forward round by round: list of (N, A)."""
    hidden = net.initial_hidden(1, N)
    out = []
    with torch.no_grad():
        for t in range(obs.shape[1]):
            q, hidden = net(obs[:1, t], adj[:1, t], hidden)
            out.append(q[0])
    return out


def hand_argmax(q: torch.Tensor, mask: np.ndarray) -> list[int]:
    """Per agent, the valid action with the largest Q (plain Python loop)."""
    best = []
    for i in range(q.shape[0]):
        valid = [a for a in range(q.shape[1]) if mask[i, a]]
        best.append(max(valid, key=lambda a: float(q[i, a])))
    return best


def hand_two_round_targets(learner: QMIXLearner, batch: dict, double_q: bool) -> tuple[float, float]:
    obs, adj = torch.as_tensor(batch["obs"]), torch.as_tensor(batch["adjacency"])
    target_q = stepped_q(learner.target_agent, obs, adj)
    online_q = stepped_q(learner.agent, obs, adj)
    chooser = online_q if double_q else target_q
    best = hand_argmax(chooser[1], batch["mask"][0, 1])
    best_q = torch.stack([target_q[1][i, a] for i, a in enumerate(best)])
    with torch.no_grad():
        v1 = learner.target_mixer(best_q[None], torch.as_tensor(batch["state"][0, 1])[None])[0]
    r0, r1 = batch["reward"][0]
    return float(r0 + GAMMA * v1), float(r1)


# -- TD targets ---------------------------------------------------------------------------------


@pytest.mark.parametrize("double_q", [True, False])
def test_two_round_episode_targets_equal_hand_computation(double_q):
    learner = make_learner(double_q=double_q)
    batch = episode_batch(rewards=(0.0, 1.5))
    y = learner.targets(learner.batch_to_tensors(batch))
    assert y.shape == (1, T)
    y0, y1 = hand_two_round_targets(learner, batch, double_q)
    assert y[0, 1].item() == pytest.approx(1.5, abs=1e-6)  # terminal: r only, no bootstrap
    assert y1 == pytest.approx(1.5)
    assert y[0, 0].item() == pytest.approx(y0, abs=1e-5)


def test_double_q_and_plain_q_bootstrap_differently():
    """The hand-made case really separates the two: online and target argmax disagree."""
    batch = episode_batch(rewards=(0.0, 1.5))
    learner = make_learner(double_q=True)
    obs, adj = torch.as_tensor(batch["obs"]), torch.as_tensor(batch["adjacency"])
    online_best = hand_argmax(stepped_q(learner.agent, obs, adj)[1], batch["mask"][0, 1])
    target_best = hand_argmax(stepped_q(learner.target_agent, obs, adj)[1], batch["mask"][0, 1])
    assert online_best != target_best
    plain = make_learner(double_q=False)  # same seed: identical networks
    y_double = learner.targets(learner.batch_to_tensors(batch))
    y_plain = plain.targets(plain.batch_to_tensors(batch))
    assert y_double[0, 0].item() != pytest.approx(y_plain[0, 0].item(), abs=1e-4)
    assert y_double[0, 0].item() <= y_plain[0, 0].item() + 1e-6  # plain max is an upper bound (monotone mixer)


def test_targets_use_online_q_argument_for_double_q():
    """Double Q picks the bootstrap actions by the ``online_q`` it is given: the online network's own
    values reproduce the default; the target network's values turn it into plain Q-learning's
    targets, which differ on this batch (see the test above)."""
    learner = make_learner(double_q=True)
    plain = make_learner(double_q=False)  # same seed: identical networks
    batch = episode_batch()
    b = learner.batch_to_tensors(batch)
    with torch.no_grad():
        online_q = learner.agent.unroll(b["obs"], b["adjacency"])
        target_q = learner.target_agent.unroll(b["obs"], b["adjacency"])
    assert torch.allclose(learner.targets(b, online_q=online_q), learner.targets(b), atol=1e-6)
    given_target_q = learner.targets(b, online_q=target_q)
    assert torch.allclose(given_target_q, plain.targets(b), atol=1e-6)
    assert not torch.allclose(given_target_q, learner.targets(b), atol=1e-4)


def test_targets_of_a_batch_of_episodes_are_per_episode():
    learner = make_learner()
    batch = episode_batch(rewards=(0.0, 2.0), b=4, seed=3)
    y = learner.targets(learner.batch_to_tensors(batch))
    for k in range(4):
        single = {name: v[k:k + 1] for name, v in batch.items()}
        assert torch.allclose(y[k], learner.targets(learner.batch_to_tensors(single))[0], atol=1e-5)


# 3 rounds: r = [1, 2, 3], terminal at the last round, bootstrap values Q'(t+1) = [10, 20, (ignored)]
REWARDS3 = torch.tensor([[1.0, 2.0, 3.0]])
TERM3 = torch.tensor([[False, False, True]])
NEXT3 = torch.tensor([[10.0, 20.0, 999.0]])


@pytest.mark.parametrize("lam, expected", [
    (0.0, [1 + 0.5 * 10, 2 + 0.5 * 20, 3.0]),                 # one-step
    (1.0, [1 + 0.5 * 2 + 0.25 * 3, 2 + 0.5 * 3, 3.0]),        # Monte Carlo return
    (0.5, [5.4375, 7.75, 3.0]),  # G1 = 2 + .5(.5*20 + .5*3); G0 = 1 + .5(.5*10 + .5*G1)
])
def test_td_lambda_targets_by_hand(lam, expected):
    y = td_targets(REWARDS3, TERM3, NEXT3, gamma=0.5, td_lambda=lam)
    assert torch.allclose(y, torch.tensor([expected]), atol=1e-6)


def test_td_lambda_without_terminal_bootstraps_the_last_round():
    """A non-terminal last round bootstraps with next[T-1] for every lambda."""
    term = torch.zeros(1, 3, dtype=torch.bool)
    for lam in (0.0, 0.5, 1.0):
        y = td_targets(REWARDS3, term, NEXT3, gamma=0.5, td_lambda=lam)
        assert y[0, 2].item() == pytest.approx(3 + 0.5 * 999)


def test_td_targets_batch_rows_are_independent():
    rewards = torch.cat([REWARDS3, 2 * REWARDS3])
    term = torch.cat([TERM3, TERM3])
    nxt = torch.cat([NEXT3, -NEXT3])
    for lam in (0.0, 0.5, 1.0):
        y = td_targets(rewards, term, nxt, 0.5, lam)
        for k in range(2):
            assert torch.allclose(y[k], td_targets(rewards[k:k + 1], term[k:k + 1], nxt[k:k + 1], 0.5, lam)[0])


@pytest.mark.parametrize("lam", [0.0, 0.5, 1.0])
def test_td_targets_broadcast_team_rewards_over_agents(lam):
    """Independent learners: rewards and flags (B, T, 1), bootstrap values (B, T, N) give
    targets (B, T, N) whose column i is agent i's own TD(lambda) targets."""
    rng = np.random.default_rng(4)
    rewards = torch.tensor(rng.random((2, 3, 1)), dtype=torch.float32)
    terminated = torch.tensor([[False, False, True], [False, False, False]]).unsqueeze(-1)
    values = torch.tensor(rng.normal(size=(2, 3, 4)), dtype=torch.float32)
    y = td_targets(rewards, terminated, values, gamma=0.9, td_lambda=lam)
    assert y.shape == (2, 3, 4)
    for i in range(4):
        torch.testing.assert_close(y[..., i], td_targets(rewards[..., 0], terminated[..., 0], values[..., i], 0.9, lam))


@pytest.mark.parametrize("lam", [0.5, 1.0])
def test_learner_targets_with_td_lambda_on_three_rounds(lam):
    learner = make_learner(td_lambda=lam, double_q=False)
    batch = episode_batch(rewards=(0.5, -1.0, 2.0), t=3, seed=4)
    b = learner.batch_to_tensors(batch)
    obs, adj = b["obs"], b["adjacency"]
    target_q = stepped_q(learner.target_agent, obs, adj)
    values = []
    for t in range(3):
        best = hand_argmax(target_q[t], batch["mask"][0, t])
        best_q = torch.stack([target_q[t][i, a] for i, a in enumerate(best)])
        with torch.no_grad():
            values.append(float(learner.target_mixer(best_q[None], b["state"][0, t][None])[0]))
    r = batch["reward"][0]
    g2 = r[2]
    g1 = r[1] + GAMMA * ((1 - lam) * values[2] + lam * g2)
    g0 = r[0] + GAMMA * ((1 - lam) * values[1] + lam * g1)
    y = learner.targets(b)
    assert np.allclose(y[0].numpy(), [g0, g1, g2], atol=1e-5)


@pytest.mark.parametrize("mixer", ["qmix", "none"])
def test_noise_sample_targets_are_the_stored_return_targets(mixer):
    """With noise samples (return_targets) the targets are the batch's ``return_target`` (B, T), broadcast over
    agents for independent learners (B, T, 1), whatever the rewards and bootstrap values say."""
    learner = make_learner(return_targets=True, mixer=mixer)
    batch = episode_batch(rewards=(0.0, 1.5), b=2)
    batch["return_target"] = np.array([[0.25, -1.0], [2.0, 0.5]], np.float32)
    y = learner.targets(learner.batch_to_tensors(batch))
    want = torch.as_tensor(batch["return_target"])
    torch.testing.assert_close(y, want if mixer == "qmix" else want.unsqueeze(-1))


def test_monte_carlo_targets_skip_the_target_networks(monkeypatch):
    """td_lambda = 1 never reads a bootstrap value, so the target networks are not run (a speed
    shortcut); the targets are still the discounted returns."""
    learner = make_learner(td_lambda=1.0)

    def fail(*args, **kwargs):
        raise AssertionError("target network run for Monte-Carlo targets")

    monkeypatch.setattr(learner.target_agent, "unroll", fail)
    monkeypatch.setattr(learner.agent, "unroll", fail)
    b = learner.batch_to_tensors(episode_batch(rewards=(0.5, -1.0, 2.0), t=3, seed=4))
    y = learner.targets(b)
    assert np.allclose(y[0].numpy(), [0.5 + GAMMA * (-1.0 + GAMMA * 2.0), -1.0 + GAMMA * 2.0, 2.0])


# -- masks ----------------------------------------------------------------------------------------


def test_masked_argmax_never_picks_a_masked_action():
    q = torch.tensor([[1.0, 5.0, 3.0], [-2.0, -1.0, -3.0], [0.0, 0.0, 9.0]])
    mask = torch.tensor([[True, False, True], [True, False, True], [False, True, False]])
    assert masked_argmax(q, mask).tolist() == [2, 0, 1]
    assert masked_argmax(q, torch.ones_like(mask)).tolist() == [1, 1, 2]


def test_masked_argmax_random_against_loop():
    gen = torch.Generator().manual_seed(0)
    q = 1e3 * torch.randn(50, 4, A, generator=gen)
    mask = torch.rand(50, 4, A, generator=gen) < 0.5
    mask[..., 3] = True  # at least one valid action everywhere
    best = masked_argmax(q, mask)
    assert mask.gather(-1, best.unsqueeze(-1)).all()
    for k in range(50):
        for i in range(4):
            assert best[k, i].item() == hand_argmax(q[k], mask[k].numpy())[i]


@pytest.mark.parametrize("double_q", [True, False])
def test_learner_targets_ignore_a_huge_masked_q(monkeypatch, double_q):
    """Action 1 gets Q + 1e6 in the network that picks the argmax; it is masked at round 1, so
    the target must be the one computed over the valid actions only."""
    mask = np.ones((1, T, N, A), bool)
    mask[0, 1, :, 1] = False
    batch = episode_batch(rewards=(0.0, 1.0), mask=mask)
    learner = make_learner(double_q=double_q)
    expected = hand_two_round_targets(learner, batch, double_q)  # unpatched networks, same valid set
    chooser = learner.agent if double_q else learner.target_agent
    original = chooser.unroll

    def boosted(obs, adj):
        q = original(obs, adj).clone()
        q[..., 1] += 1e6
        return q

    monkeypatch.setattr(chooser, "unroll", boosted)
    y = learner.targets(learner.batch_to_tensors(batch))
    assert y[0, 0].item() == pytest.approx(expected[0], abs=1e-4)
    assert abs(y[0, 0].item()) < 1e3
    # the patch is effective: without the mask the boosted action wins and the target changes
    unmasked = dict(batch, mask=np.ones((1, T, N, A), bool))
    y_unmasked = learner.targets(learner.batch_to_tensors(unmasked))
    assert abs(y_unmasked[0, 0].item() - y[0, 0].item()) > 1e-3


# -- the loss and what the mixer sees --------------------------------------------------------------


def test_update_feeds_the_mixer_pre_action_state_and_chosen_q(monkeypatch):
    learner = make_learner()
    batch = episode_batch(rewards=(0.0, 1.0), b=3, seed=5)
    b = learner.batch_to_tensors(batch)
    with torch.no_grad():
        q = learner.agent.unroll(b["obs"], b["adjacency"])
    expected_chosen = q.gather(-1, b["actions"].unsqueeze(-1)).squeeze(-1)
    calls = []
    original = learner.mixer.forward

    def recording(agent_qs, states):
        calls.append((agent_qs.detach().clone(), states.detach().clone()))
        return original(agent_qs, states)

    monkeypatch.setattr(learner.mixer, "forward", recording)
    learner.update(batch)
    assert len(calls) == 1
    agent_qs, states = calls[0]
    assert states.shape == (3, T, S)
    assert torch.equal(states, torch.as_tensor(batch["state"]))  # s_t, not s_{t+1}
    assert torch.allclose(agent_qs, expected_chosen, atol=1e-6)


def test_update_loss_is_mean_squared_td_error():
    learner = make_learner()
    batch = episode_batch(rewards=(0.0, 1.0), b=2, seed=6)
    b = learner.batch_to_tensors(batch)
    with torch.no_grad():
        q = learner.agent.unroll(b["obs"], b["adjacency"])
        q_tot = learner.mixer(q.gather(-1, b["actions"].unsqueeze(-1)).squeeze(-1), b["state"])
        y = learner.targets(b)
    out = learner.update(batch)
    assert out["loss"] == pytest.approx(float(((q_tot - y) ** 2).mean()), rel=1e-5)
    assert np.isfinite([out["grad_norm"], out["q_tot"], out["target"], out["q_taken"]]).all()
    assert learner.updates == 1


def test_terminal_reward_enters_loss_and_gradient():
    """Only the last round is rewarded: changing r[T-1] changes the loss by exactly the terminal
    term, and the gradient of both the mixer and the agent network."""
    base = make_learner()
    batches = {r: episode_batch(rewards=(0.0, r), b=2, seed=7) for r in (0.0, 5.0)}
    b = base.batch_to_tensors(batches[0.0])
    with torch.no_grad():
        q = base.agent.unroll(b["obs"], b["adjacency"])
        q_tot = base.mixer(q.gather(-1, b["actions"].unsqueeze(-1)).squeeze(-1), b["state"])
    learners = {r: copy.deepcopy(base) for r in batches}
    losses = {r: learners[r].update(batch)["loss"] for r, batch in batches.items()}
    last = q_tot[:, -1]
    expected_delta = float((((last - 5.0) ** 2 - last ** 2).sum() / q_tot.numel()))
    assert losses[5.0] - losses[0.0] == pytest.approx(expected_delta, rel=1e-4, abs=1e-6)

    def grads(lrn, module):
        return torch.cat([p.grad.flatten() for p in module.parameters() if p.grad is not None])

    for name in ("agent", "mixer"):
        g5, g0 = grads(learners[5.0], getattr(learners[5.0], name)), grads(learners[0.0], getattr(learners[0.0], name))
        assert g5.abs().sum() > 0
        assert not torch.allclose(g5, g0), name


def test_terminal_only_reward_batch_gives_nonzero_gradient_when_q_is_zero():
    """With Q_tot == 0 everywhere (online and target), r = [0, 0] gives zero loss and gradient;
    r = [0, 1] (reward only in the terminal round) gives TD error -1 there and a nonzero gradient."""
    learner = make_learner(perturb_targets=False)
    with torch.no_grad():  # online and target: Q_tot == 0 everywhere (w2 = 0, b2 = 0)
        for mixer in (learner.mixer, learner.target_mixer):
            mixer.hyper_w2[-1].weight.zero_()
            mixer.hyper_w2[-1].bias.zero_()
            mixer.hyper_b2[-1].weight.zero_()
            mixer.hyper_b2[-1].bias.zero_()
    zero = learner.update(episode_batch(rewards=(0.0, 0.0), seed=8))
    assert zero["loss"] == 0.0 and zero["grad_norm"] == 0.0
    out = learner.update(episode_batch(rewards=(0.0, 1.0), seed=8))
    assert out["loss"] == pytest.approx(0.5)  # one of two rounds has TD error -1
    assert out["grad_norm"] > 0
    assert learner.mixer.hyper_b2[-1].bias.grad.abs().item() > 0


# -- target networks --------------------------------------------------------------------------------


def online_params(learner):
    return [p.detach().clone() for p in list(learner.agent.parameters()) + list(learner.mixer.parameters())]


def target_params(learner):
    return [p.detach().clone() for p in list(learner.target_agent.parameters()) + list(learner.target_mixer.parameters())]


def same(xs, ys) -> bool:
    return all(torch.equal(x, y) for x, y in zip(xs, ys))


def test_targets_start_as_copies_and_are_frozen():
    learner = make_learner(perturb_targets=False)
    assert same(online_params(learner), target_params(learner))
    assert not any(p.requires_grad for p in learner.target_agent.parameters())
    assert not any(p.requires_grad for p in learner.target_mixer.parameters())


def test_hard_target_sync_every_k_updates():
    learner = make_learner(perturb_targets=False, target_update="hard", target_update_interval=3, lr=1e-2)
    batch = episode_batch(rewards=(0.0, 1.0), b=2, seed=9)
    initial = target_params(learner)
    for k in range(1, 8):
        before = online_params(learner)
        learner.update(batch)
        online, target = online_params(learner), target_params(learner)
        assert not same(before, online), f"online net did not change at update {k}"
        if k % 3 == 0:
            assert same(online, target), f"targets not synced right after update {k}"
        else:
            assert not same(online, target), f"targets equal online after update {k}"
        if k < 3:
            assert same(target, initial), f"targets moved before the first sync (update {k})"
    assert learner.updates == 7


def test_mixer_warmup_holds_the_agent_network_still_for_its_updates():
    """qmix.mixer_warmup = 2: the first two updates move the mixer only (the agent network keeps
    a teacher's weights while a fresh mixer learns its targets); the third moves both."""
    learner = make_learner(mixer_warmup=2, lr=1e-2)
    batch = episode_batch(rewards=(0.0, 1.0), b=2, seed=4)

    def agent_and_mixer():
        return ([p.detach().clone() for p in learner.agent.parameters()],
                [p.detach().clone() for p in learner.mixer.parameters()])

    for update in (1, 2, 3):
        agent_before, mixer_before = agent_and_mixer()
        learner.update(batch)
        agent_after, mixer_after = agent_and_mixer()
        assert not same(mixer_before, mixer_after), f"the mixer did not learn at update {update}"
        assert same(agent_before, agent_after) == (update <= 2), f"update {update}"


def test_soft_target_update_is_polyak_every_update():
    tau = 0.3
    learner = make_learner(target_update="soft", tau=tau, lr=1e-2)
    batch = episode_batch(rewards=(0.0, 1.0), b=2, seed=10)
    for _ in range(3):
        old_target = target_params(learner)
        learner.update(batch)
        new_online, new_target = online_params(learner), target_params(learner)
        for p, t_old, t_new in zip(new_online, old_target, new_target):
            assert torch.allclose(t_new, tau * p + (1 - tau) * t_old, atol=1e-6)
        assert not same(new_online, new_target)
    # one parameter, checked number by number
    p = learner.agent.head[-1].bias.detach().clone()
    t_old = learner.target_agent.head[-1].bias.detach().clone()
    learner.update(batch)
    p_new = learner.agent.head[-1].bias.detach()
    assert not torch.equal(p_new, p)
    for j in range(p.numel()):
        want = tau * p_new[j].item() + (1 - tau) * t_old[j].item()
        assert learner.target_agent.head[-1].bias[j].item() == pytest.approx(want, abs=1e-6)


def test_sync_targets_by_default_copies_the_online_networks():
    learner = make_learner()  # perturbed targets
    assert not same(online_params(learner), target_params(learner))
    learner.sync_targets()
    assert same(online_params(learner), target_params(learner))


def first_step(lr: float, set_lr: float | None = None) -> list[torch.Tensor]:
    """How much one update moves the online parameters, from seed 0, with learning rate ``lr``
    (changed to ``set_lr`` before the update when given)."""
    learner = make_learner(lr=lr)
    if set_lr is not None:
        learner.set_lr(set_lr)
    before = online_params(learner)
    learner.update(episode_batch(rewards=(0.0, 1.0), b=2, seed=12))
    return [after - b for after, b in zip(online_params(learner), before)]


def test_adam_steps_with_the_configured_and_the_scheduled_learning_rate():
    """Adam's first step is lr * g / (|g| + eps): four times the learning rate, four times the step;
    set_lr changes the rate of the next update as if it had been configured."""
    small, large, scheduled = first_step(1e-4), first_step(4e-4), first_step(1e-4, set_lr=4e-4)
    moved = [(s, l) for s, l in zip(small, large) if s.abs().max() > 0]
    assert moved
    for s, l in moved:
        torch.testing.assert_close(l, 4 * s, rtol=1e-3, atol=1e-9)
    for l, sch in zip(large, scheduled):
        assert torch.equal(l, sch)


def test_load_networks_copies_networks_into_online_and_targets():
    """load_networks takes a run's agent and mixer (or another agent in place of its agent) for
    the online networks and the targets alike."""
    source = make_learner(seed=1)
    learner = make_learner(seed=2)
    learner.load_networks(source.state_dict())
    assert same(online_params(learner), online_params(source))
    assert same(target_params(learner), online_params(source))
    other_agent = make_learner(seed=3)
    learner.load_networks(source.state_dict(), agent=other_agent.agent.state_dict())
    want = [p.detach() for p in list(other_agent.agent.parameters()) + list(source.mixer.parameters())]
    assert same(online_params(learner), want) and same(target_params(learner), want)


def test_networks_and_batches_live_on_the_learner_device():
    """Every network, and every batch tensor, is put on the device given (here the shapeless
    'meta' device, which CPU-only machines have too)."""
    cfg = QMIXConfig(**SMALL)
    meta = torch.device("meta")
    learner = QMIXLearner(D, S, N, A, cfg, meta)
    for net in (learner.agent, learner.mixer, learner.target_agent, learner.target_mixer):
        assert {p.device for p in net.parameters()} == {meta}
    assert {v.device for v in learner.batch_to_tensors(episode_batch()).values()} == {meta}


def test_learner_state_dict_round_trip():
    learner = make_learner(lr=1e-2)
    batch = episode_batch(rewards=(0.0, 1.0), b=2, seed=11)
    learner.update(batch)
    clone = make_learner(seed=99)
    clone.load_state_dict(copy.deepcopy(learner.state_dict()))
    assert clone.updates == 1
    assert same(online_params(clone), online_params(learner))
    assert same(target_params(clone), target_params(learner))
    a, b = learner.update(batch), clone.update(batch)  # optimizer state restored too
    assert a["loss"] == b["loss"]
    assert same(online_params(clone), online_params(learner))


# -- the runner ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def env_and_agent():
    env = TopologyParallelEnv(EnvConfig(n_agents=3, rounds=2))
    torch.manual_seed(0)
    agent = AgentQNetwork(env.obs_builder.dim, N_ACTIONS, hidden_dim=16)
    return env, agent


def test_greedy_rollouts_are_deterministic(env_and_agent):
    env, agent = env_and_agent
    runner = EpisodeRunner(env, agent, torch.device("cpu"))
    rec1, st1 = runner.run(0.0, np.random.default_rng(1), seed=7)
    rec2, st2 = runner.run(0.0, np.random.default_rng(1), seed=7)
    rec3, _ = runner.run(0.0, np.random.default_rng(12345), seed=7)  # greedy: the rng does not matter
    assert np.array_equal(rec1.actions, rec2.actions) and np.array_equal(rec1.actions, rec3.actions)
    assert np.array_equal(rec1.reward, rec2.reward) and st1.reward == st2.reward
    assert np.array_equal(rec1.obs, rec2.obs) and np.array_equal(rec1.state, rec2.state)
    assert np.array_equal(st1.q_values, st2.q_values)


def test_greedy_actions_are_the_argmax_of_the_agent_q(env_and_agent):
    env, agent = env_and_agent
    runner = EpisodeRunner(env, agent, torch.device("cpu"))
    rec, stats = runner.run(0.0, np.random.default_rng(0), seed=3)
    with torch.no_grad():
        q = agent.unroll(torch.as_tensor(rec.obs)[None], torch.as_tensor(rec.adjacency)[None])[0]
    assert np.array_equal(rec.actions, masked_argmax(q, torch.as_tensor(rec.mask)).numpy())
    assert np.allclose(stats.q_values, q.gather(-1, torch.as_tensor(rec.actions)[..., None])[..., 0].numpy(), atol=1e-5)


def test_rollouts_run_in_eval_mode(env_and_agent, monkeypatch):
    env, agent = env_and_agent
    runner = EpisodeRunner(env, agent, torch.device("cpu"))
    seen = []
    original = env.step

    def recording_step(actions):
        seen.append(agent.training)
        return original(actions)

    monkeypatch.setattr(env, "step", recording_step)
    for epsilon in (0.0, 0.5):
        agent.train()
        runner.run(epsilon, np.random.default_rng(2), seed=11)
    assert seen == [False] * (2 * env.rounds)


def test_runner_records_pre_action_state_and_previous_graph(env_and_agent, monkeypatch):
    env, agent = env_and_agent
    runner = EpisodeRunner(env, agent, torch.device("cpu"))
    states, graphs = [], []
    original = env.step

    def recording_step(actions):
        states.append(env.state().copy())
        graphs.append(env.adjacency.copy())
        return original(actions)

    monkeypatch.setattr(env, "step", recording_step)
    rec, stats = runner.run(1.0, np.random.default_rng(4), seed=5)  # random actions: graphs are non-trivial
    assert np.array_equal(rec.state, np.stack(states))
    assert not np.array_equal(rec.state[0], rec.state[1])
    assert np.array_equal(rec.adjacency, np.stack(graphs).astype(np.float32))
    assert not rec.adjacency[0].any()  # no graph before round 1
    assert np.array_equal(rec.adjacency[1], env.history[0].adjacency.astype(np.float32))
    assert rec.terminated.tolist() == [False, True]
    assert rec.reward[0] == 0.0 and rec.reward[1] == pytest.approx(stats.reward)
    assert rec.obs.dtype == np.float32 and rec.state.dtype == np.float32 and rec.actions.dtype == np.int64


def test_select_actions_respects_masks_and_epsilon():
    rng = np.random.default_rng(0)
    q = rng.normal(size=(4, A))
    q[:, 5] = 100.0
    mask = np.ones((4, A), bool)
    mask[:, 5] = False
    mask[0] = [False, False, True, False, False, False]
    greedy = select_actions(q, mask, 0.0, rng)
    assert greedy[0] == 2 and (greedy != 5).all()
    assert np.array_equal(greedy[1:], np.where(mask, q, -np.inf).argmax(axis=1)[1:])
    picks = np.stack([select_actions(q, mask, 1.0, rng) for _ in range(600)])
    assert (picks[:, 0] == 2).all() and (picks != 5).all()
    assert set(np.unique(picks[:, 1])) == {0, 1, 2, 3, 4}  # explores every valid action


def test_team_exploration_plays_one_shared_valid_action():
    rng = np.random.default_rng(0)
    q = rng.normal(size=(3, A))
    mask = np.ones((3, A), bool)
    mask[0, 4] = False  # action 4 is not valid for every agent: never a team action
    picks = np.stack([select_actions(q, mask, 1.0, rng, team_explore=1.0) for _ in range(600)])
    assert (picks == picks[:, :1]).all()  # every round: the same action for the whole team
    assert set(np.unique(picks[:, 0])) == {0, 1, 2, 3, 5}
    # a team with no action valid for all explores alone, still within each agent's mask
    lonely = np.zeros((3, A), bool)
    lonely[0, 0] = lonely[1, 1] = lonely[2, 2] = True
    assert select_actions(q, lonely, 1.0, rng, team_explore=1.0).tolist() == [0, 1, 2]


def test_team_exploration_share_of_rounds_and_greedy_otherwise():
    rng = np.random.default_rng(1)
    q = np.tile(np.arange(A, dtype=float), (3, 1))  # greedy: action A-1 for everyone
    mask = np.ones((3, A), bool)
    picks = np.stack([select_actions(q, mask, 0.4, rng, team_explore=0.5) for _ in range(6000)])
    explored = picks != A - 1
    # independent exploration, in the 1 - 0.4 * 0.5 rounds that are not team rounds: each agent with
    # probability 0.4 * 0.5, 5/6 of it visibly; rounds where exactly one agent left its greedy action
    solo_rate = explored[(explored.sum(axis=1) == 1)].shape[0] / len(picks)
    visible = 0.4 * 0.5 * 5 / 6
    shared = (picks == picks[:, :1]).all(axis=1) & (picks[:, 0] != A - 1)
    assert abs(shared.mean() - 0.4 * 0.5 * 5 / 6) < 0.02  # team rounds that left the greedy action (SE 0.005)
    assert abs(solo_rate - (1 - 0.4 * 0.5) * 3 * visible * (1 - visible) ** 2) < 0.02  # SE 0.006
    assert np.array_equal(select_actions(q, mask, 0.0, rng, team_explore=1.0), np.full(3, A - 1))


def test_deviation_exploration_moves_one_agent_off_its_greedy_action():
    rng = np.random.default_rng(2)
    q = np.tile(np.arange(A, dtype=float), (3, 1))
    q[1] = q[1, ::-1]  # greedy: A-1, 0, A-1
    greedy = np.array([A - 1, 0, A - 1])
    mask = np.ones((3, A), bool)
    mask[2, 3] = False
    picks = np.stack([select_actions(q, mask, 1.0, rng, deviation_explore=1.0) for _ in range(3000)])
    moved = picks != greedy
    assert (moved.sum(axis=1) == 1).all()  # every round: exactly one agent off its greedy action
    counts = moved.sum(axis=0)
    assert (np.abs(counts / len(picks) - 1 / 3) < 0.04).all()  # the deviating agent is drawn uniformly
    for i in range(3):  # every valid non-greedy action, never a masked one
        assert set(np.unique(picks[moved[:, i], i])) == set(np.flatnonzero(mask[i])) - {greedy[i]}
    # an agent with a single valid action cannot deviate: the round stays greedy
    only = np.zeros((3, A), bool)
    only[np.arange(3), greedy] = True
    assert np.array_equal(select_actions(q, only, 1.0, rng, deviation_explore=1.0), greedy)


def test_ranked_deviations_favour_the_actions_the_greedy_team_nearly_prefers():
    """With deviation_rank_decay 0.5 a deviating agent's k-th best valid non-greedy action (by its
    own Q) is drawn with weight 0.5 ** k. The option changes which action a deviating agent takes
    and nothing else: the same draws are made, and every other round plays the same actions."""
    q = np.array([[0.3, 0.9, 0.1, 0.5, 0.7, 0.2]] * 3)  # greedy: action 1; then 4, 3, 0, 5, 2
    mask = np.ones((3, A), bool)
    mask[0, 3] = False  # agent 0 ranks 4, 0, 5, 2
    rng = np.random.default_rng(4)
    picks = np.stack([select_actions(q, mask, 1.0, rng, deviation_explore=1.0, deviation_rank_decay=0.5)
                      for _ in range(12000)])
    for i, order in ((0, [4, 0, 5, 2]), (1, [4, 3, 0, 5, 2])):
        moved = picks[picks[:, i] != 1, i]
        weights = 0.5 ** np.arange(len(order))
        shares = np.array([(moved == a).mean() for a in order])
        assert np.abs(shares - weights / weights.sum()).max() < 0.03, (i, shares)
        assert set(np.unique(moved)) == set(order)  # never a masked action
    uniform, ranked = np.random.default_rng(5), np.random.default_rng(5)
    greedy = np.array([1, 1, 1])
    changed = 0
    for _ in range(400):
        a = select_actions(q, mask, 0.7, uniform, 0.25, 0.5)
        b = select_actions(q, mask, 0.7, ranked, 0.25, 0.5, deviation_rank_decay=0.5)
        if not np.array_equal(a, b):  # only in a deviation round, and only the deviating agent's action
            changed += 1
            assert np.array_equal(a != greedy, b != greedy) and (a != greedy).sum() == 1
    assert changed > 0
    assert uniform.random() == ranked.random()


def test_exploration_shares_split_rounds_between_team_deviation_and_independent():
    rng = np.random.default_rng(3)
    q = np.tile(np.arange(A, dtype=float), (3, 1))  # greedy: action A-1 for everyone
    mask = np.ones((3, A), bool)
    picks = np.stack([select_actions(q, mask, 0.6, rng, team_explore=0.25, deviation_explore=0.5)
                      for _ in range(8000)])
    moved = (picks != A - 1).sum(axis=1)
    shared = (picks == picks[:, :1]).all(axis=1) & (picks[:, 0] != A - 1)
    assert abs(shared.mean() - 0.6 * 0.25 * 5 / 6) < 0.015
    # one agent off greedy: every deviation round, plus independent rounds where one agent explored visibly
    p_alone = 0.6 * 0.25 * 5 / 6
    independent_single = 3 * p_alone * (1 - p_alone) ** 2
    expected_single = 0.6 * 0.5 + (1 - 0.6 * 0.75) * independent_single
    assert abs((moved == 1).mean() - expected_single) < 0.02


def _batch(b=4, t=2, n=3, d=10, s=20, seed=0):
    rng = np.random.default_rng(seed)
    return {"obs": rng.random((b, t, n, d), dtype=np.float32), "adjacency": np.zeros((b, t, n, n), np.float32),
            "state": rng.random((b, t, s), dtype=np.float32), "mask": np.ones((b, t, n, 6), bool),
            "actions": rng.integers(0, 6, (b, t, n)), "reward": rng.random((b, t), dtype=np.float32),
            "terminated": np.array([[False, True]] * b)}


@pytest.mark.parametrize("td_lambda", [0.0, 1.0])
def test_vdn_and_independent_losses(td_lambda):
    """vdn: Q_tot is the sum of the chosen Q_i; none: each agent's chosen Q_i is regressed on the
    team reward on its own (the loss is the mean over agents)."""
    torch.manual_seed(0)
    batch = _batch()
    for mixer in ("vdn", "none"):
        learner = QMIXLearner(10, 20, 3, 6, QMIXConfig(mixer=mixer, td_lambda=td_lambda, hidden_dim=16),
                              torch.device("cpu"))
        b = learner.batch_to_tensors(batch)
        loss, q_tot, y, chosen = learner.loss_terms(b)
        if mixer == "vdn":
            torch.testing.assert_close(q_tot, chosen.sum(dim=-1))
            assert y.shape == (4, 2)
        else:
            torch.testing.assert_close(q_tot, chosen)
            assert y.shape[:2] == (4, 2)
            if td_lambda == 1.0:  # Monte-Carlo: every agent's target is the team's return
                returns = b["reward"][:, 1] + 0.0
                torch.testing.assert_close(y[:, 1, 0], returns)
        torch.testing.assert_close(loss, ((q_tot - y) ** 2).mean())


def test_agent_network_without_message_passing_ignores_the_graph():
    """gnn: false: an agent's Q-values depend on its own observation only."""
    from learners.agent_network import AgentQNetwork
    torch.manual_seed(0)
    net = AgentQNetwork(10, 6, 16, gnn=False)
    obs = torch.rand(1, 3, 10)
    full, none = torch.ones(1, 3, 3) - torch.eye(3), torch.zeros(1, 3, 3)
    q_full, _ = net(obs, full, net.initial_hidden(1, 3))
    changed = obs.clone()
    changed[0, 1] += 1.0
    q_changed, _ = net(changed, full, net.initial_hidden(1, 3))
    q_none, _ = net(obs, none, net.initial_hidden(1, 3))
    torch.testing.assert_close(q_full, q_none)
    torch.testing.assert_close(q_full[0, [0, 2]], q_changed[0, [0, 2]])
    assert not torch.allclose(q_full[0, 1], q_changed[0, 1])


def test_topology_exploration_plays_the_fixed_baselines_joint_actions():
    """topology_explore: an exploring round plays one of the library's joint actions, uniformly,
    skipping those with an action masked for some agent; greedy rounds are untouched."""
    from learners.runner import topology_library
    library = topology_library(3, ("specialist", "specialist", "analyzer"))
    assert library.shape == (5, 3) and library.tolist()[3] == [0, 0, 3]  # star: the analyzer aggregates
    rng = np.random.default_rng(0)
    q = np.zeros((3, N_ACTIONS))
    mask = np.ones((3, N_ACTIONS), bool)
    picks = [tuple(select_actions(q, mask, 1.0, rng, topology_explore=1.0, topologies=library)) for _ in range(2000)]
    counts = {tuple(t): picks.count(tuple(t)) for t in library.tolist()}
    assert sum(counts.values()) == 2000 and min(counts.values()) > 300
    no_debate = mask.copy()
    no_debate[1, 5] = False
    picks = {tuple(select_actions(q, no_debate, 1.0, rng, topology_explore=1.0, topologies=library))
             for _ in range(300)}
    assert (5, 5, 5) not in picks and len(picks) == 4
    assert select_actions(q + np.eye(3, N_ACTIONS), mask, 0.0, rng, topology_explore=1.0,
                          topologies=library).tolist() == [0, 1, 2]
