"""learners.batch_runner: B episodes at once on the simulated team, and what it shares with the
one-episode runner.

- ``select_actions`` (a batch of one) draws and picks exactly as the one-episode algorithm the
  documented runs used (kept below as the reference, written out scalar by scalar);
- a batch of one is ``EpisodeRunner.run`` bit for bit; a batch of B plays each episode as the
  PettingZoo env plays the same joint actions;
- noise-sample returns are unbiased estimates of the played return with less variance;
- ``EpisodeReplayBuffer.add_batch`` stores what B calls of ``add`` store."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from learners.agent_network import AgentQNetwork
from learners.batch_runner import BatchEpisodeRunner, BatchStats
from learners.buffer import ReplayEpisode, EpisodeReplayBuffer
from learners.runner import EpisodeRunner, pick_in_rows, select_actions, select_actions_batch, topology_library
from topo_env.frontends.env_config import EnvConfig
from topo_env.frontends.parallel_env import TopologyParallelEnv
from topo_env.frontends.vector_env import SimVectorEnv

torch.set_num_threads(1)


# -- the one-episode algorithm, as it was written before the batched version --------------------
def reference_select(q, mask, epsilon, rng, team=0.0, deviation=0.0, decay=1.0, topology=0.0, topologies=None):
    def uniform(values, u):
        return values[min(int(u * len(values)), len(values) - 1)]

    def weighted(values, weights, u):
        cdf = np.cumsum(weights) / weights.sum()
        return values[min(int(np.searchsorted(cdf, u, side="right")), len(values) - 1)]

    n = q.shape[0]
    greedy = np.where(mask, q, -np.inf).argmax(axis=1)
    team_round = deviation_round = topology_round = False
    if team > 0.0 or deviation > 0.0 or topology > 0.0:
        round_draw, round_pick = rng.random(), rng.random()
        team_round = round_draw < epsilon * team
        deviation_round = not team_round and round_draw < epsilon * (team + deviation)
        topology_round = not team_round and not deviation_round and round_draw < epsilon * (team + deviation + topology)
        epsilon = epsilon * (1.0 - team - deviation - topology)
    explore = rng.random(n) < epsilon
    picks = rng.random(n)
    if team_round:
        shared = np.flatnonzero(mask.all(axis=0))
        if len(shared):
            return np.full(n, uniform(shared, round_pick))
        explore[:] = True
    if topology_round:
        playable = [t for t in topologies if mask[np.arange(n), t].all()]
        if playable:
            return np.array(uniform(np.asarray(playable), round_pick))
        explore[:] = True
    actions = greedy.copy()
    if deviation_round:
        i = uniform(np.arange(n), round_pick)
        others = np.flatnonzero(mask[i] & (np.arange(mask.shape[1]) != greedy[i]))
        if len(others) and decay == 1.0:
            actions[i] = uniform(others, picks[i])
        elif len(others):
            ranked = others[np.argsort(-q[i, others], kind="stable")]
            actions[i] = weighted(ranked, decay ** np.arange(len(ranked)), picks[i])
        return actions
    for i in np.flatnonzero(explore):
        actions[i] = uniform(np.flatnonzero(mask[i]), picks[i])
    return actions


def test_select_actions_is_the_one_episode_algorithm():
    """Random Q-values with ties, random masks (some leaving no action valid for all, some no
    named topology playable), every exploration kind: the same actions and the same draws."""
    draw = np.random.default_rng(5)
    library = topology_library(3)
    kinds = [(0, 0, 1, 0), (1, 0, 1, 0), (0, 1, 1, 0), (0, 1, 0.5, 0), (0, 0, 1, 1), (0.3, 0.3, 0.7, 0.3)]
    for trial in range(3000):
        q = draw.normal(size=(3, 6)).round(1)
        mask = draw.random((3, 6)) < 0.6
        if trial % 3 == 0:
            mask[:] = True
        mask[np.arange(3), draw.integers(0, 6, 3)] = True
        epsilon, seed = float(draw.random()), int(draw.integers(1 << 30))
        team, deviation, decay, topology = kinds[trial % len(kinds)]
        ours, theirs = np.random.default_rng(seed), np.random.default_rng(seed)
        got = select_actions(q, mask, epsilon, ours, team, deviation, decay, topology, library)
        want = reference_select(q, mask, epsilon, theirs, team, deviation, decay, topology, library)
        assert got.tolist() == want.tolist(), (trial, got, want)
        assert ours.random() == theirs.random()  # the same number of draws


def test_batch_rows_follow_their_own_epsilon():
    q = np.random.default_rng(0).normal(size=(400, 3, 6))
    mask = np.ones((400, 3, 6), bool)
    epsilon = np.where(np.arange(400) < 200, 0.0, 1.0)
    acts = select_actions_batch(q, mask, epsilon, np.random.default_rng(1), team_explore=1.0)
    np.testing.assert_array_equal(acts[:200], q[:200].argmax(axis=2))
    assert (acts[200:] == acts[200:, :1]).all()  # team rounds: one shared action
    assert len(np.unique(acts[200:, 0])) == 6


def test_pick_in_rows_weights_skip_what_is_not_allowed():
    allowed = np.array([[True, False, True, True]] * 3 + [[False] * 4])
    weights = np.array([[1.0, 9.0, 1.0, 1.0]] * 4)
    u = np.array([0.2, 0.5, 0.9, 0.5])
    assert pick_in_rows(allowed, u, weights).tolist() == [0, 2, 3, -1]
    assert pick_in_rows(allowed, u).tolist() == [0, 2, 3, -1]


def network(obs_dim: int, seed: int = 0) -> AgentQNetwork:
    torch.manual_seed(seed)
    return AgentQNetwork(obs_dim, 6, hidden_dim=16, gnn_layers=1, dueling=True)


EXPLORATION = [dict(), dict(team_explore=1.0), dict(team_explore=0.3, deviation_explore=0.4,
                                                      deviation_rank_decay=0.5, topology_explore=0.2)]


@pytest.mark.parametrize("shares", EXPLORATION, ids=["independent", "team", "mixed"])
def test_a_batch_of_one_is_the_one_episode_runner(shares):
    config = EnvConfig(adversary_position="random", n_adversaries=1)
    env = TopologyParallelEnv(config)
    agent = network(env.obs_builder.dim)
    one = EpisodeRunner(env, agent, "cpu")
    batch = BatchEpisodeRunner(SimVectorEnv(config), agent, "cpu")
    for seed in (11, 12, 13, 14):
        record, stats = one.run(0.6, np.random.default_rng([seed, 1]), seed=seed, policy_version=3, **shares)
        episodes, batch_stats = batch.run([seed], 0.6, np.random.default_rng([seed, 1]), "train", policy_version=3,
                                          **shares)
        for field in EpisodeReplayBuffer.FIELDS[:-1]:
            np.testing.assert_array_equal(getattr(episodes, field)[0], getattr(record, field), err_msg=field)
        assert episodes.policy_version == record.policy_version == 3
        assert (batch_stats.reward[0], batch_stats.accuracy[0], batch_stats.tokens[0], batch_stats.calls[0]) == \
            (stats.reward, stats.accuracy, stats.tokens, stats.calls)
        np.testing.assert_array_equal(batch_stats.graphs[0], stats.adjacency)
        np.testing.assert_allclose(batch_stats.q_values[0], stats.q_values, rtol=1e-6)
        assert batch_stats.density[0] == pytest.approx(stats.density)


def test_a_batch_plays_each_episode_as_the_env_plays_its_actions():
    config = EnvConfig.from_dict({"profile": "humaneval"})
    env = TopologyParallelEnv(config)
    batch = BatchEpisodeRunner(SimVectorEnv(config), network(env.obs_builder.dim), "cpu")
    seeds = list(range(40, 100))
    episodes, stats = batch.run(seeds, 0.5, np.random.default_rng(0), "train", team_explore=0.5)
    names = env.possible_agents
    for b, seed in enumerate(seeds):
        obs, _ = env.reset(seed=seed, options={"split": "train"})
        total = 0.0
        for t in range(env.rounds):
            np.testing.assert_array_equal(np.stack([obs[a]["observation"] for a in names]), episodes.obs[b, t])
            obs, rewards, *_ = env.step({a: int(episodes.actions[b, t, i]) for i, a in enumerate(names)})
            assert rewards[names[0]] == pytest.approx(episodes.reward[b, t], rel=1e-6)
            total += rewards[names[0]]
        assert total == stats.reward[b] and env.accuracy == stats.accuracy[b]


def test_noise_sample_returns_are_unbiased_and_less_noisy():
    """The noise samples' mean return from round t estimates the return the episode's actions earn,
    averaged over the noise still to come: over many greedy episodes its mean equals the mean
    played return within sampling error, and it varies less: before round 1 far less (the latent
    and blind spots are redrawn too), before round 2 a little (round 1's answers are kept)."""
    config = EnvConfig()
    venv = SimVectorEnv(config)
    runner = BatchEpisodeRunner(venv, network(venv.obs_builder.dim, seed=3), "cpu")
    seeds = list(range(4000))
    episodes, stats = runner.run(seeds, 0.0, np.random.default_rng(0), noise_samples=8,
                                 noise_rng=np.random.default_rng(9), gamma=0.99)
    played = stats.reward
    for t, discount, share in ((0, 0.99, 0.6), (1, 1.0, 0.95)):
        target = episodes.return_target[:, t].astype(np.float64)
        diff = target - discount * played
        assert abs(diff.mean()) < 3 * diff.std() / np.sqrt(len(diff)), t
        assert target.var() < share * (discount * played).var(), t
    plain, _ = runner.run(seeds[:10], 0.0, np.random.default_rng(0))
    assert not plain.return_target.any()  # no noise samples: no return targets


def test_privileged_state_extends_the_state():
    config = EnvConfig()
    venv = SimVectorEnv(config)
    agent = network(venv.obs_builder.dim)
    plain, _ = BatchEpisodeRunner(venv, agent, "cpu").run([1, 2], 0.0, np.random.default_rng(0))
    runner = BatchEpisodeRunner(venv, agent, "cpu", privileged=True)
    rich, _ = runner.run([1, 2], 0.0, np.random.default_rng(0))
    width = venv.obs_builder.state_dim
    assert rich.state.shape[-1] == runner.state_dim == width + venv.privileged_dim
    np.testing.assert_array_equal(rich.state[..., :width], plain.state)
    np.testing.assert_array_equal(rich.state[:, 0, width:], venv.privileged())
    np.testing.assert_array_equal(rich.obs, plain.obs)  # what the agents read is unchanged


def test_add_batch_stores_what_add_stores():
    config = EnvConfig()
    venv = SimVectorEnv(config)
    runner = BatchEpisodeRunner(venv, network(venv.obs_builder.dim), "cpu")
    episodes, _ = runner.run(list(range(13)), 1.0, np.random.default_rng(0), policy_version=7)
    dims = (2, 3, venv.obs_builder.dim, venv.obs_builder.state_dim, 6)
    for capacity, chunks in ((20, [5, 8]), (6, [4, 9]), (5, [13])):
        one, many = EpisodeReplayBuffer(capacity, *dims), EpisodeReplayBuffer(capacity, *dims)
        start = 0
        for size in chunks:
            part = episodes.take(slice(start, start + size))
            many.add_batch(part)
            for b in range(size):
                one.add(ReplayEpisode(*(getattr(part, f)[b] for f in EpisodeReplayBuffer.FIELDS[:-1]),
                                      policy_version=part.policy_version))
            start += size
        assert (one.position, one.size) == (many.position, many.size)
        for name in EpisodeReplayBuffer.FIELDS[:-1]:
            np.testing.assert_array_equal(one.data[name], many.data[name], err_msg=f"{capacity} {name}")
        np.testing.assert_array_equal(one.policy_version, many.policy_version)


def test_stats_of_one_episode_runs_stack():
    env = TopologyParallelEnv(EnvConfig())
    runner = EpisodeRunner(env, network(env.obs_builder.dim), "cpu")
    runs = [runner.run(0.3, np.random.default_rng(k), seed=k)[1] for k in range(3)]
    stacked = BatchStats.of_episodes(runs)
    assert stacked.reward.tolist() == [r.reward for r in runs] and stacked.graphs.shape == (3, 2, 3, 3)
    assert stacked.targets is None and stacked.buckets == tuple(r.bucket for r in runs)
