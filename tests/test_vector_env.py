"""topo_env.frontends.vector_env.SimVectorEnv: B episodes of the PettingZoo env at once on the batch simulator.

Every episode is checked against the one-episode env played with the same joint actions: the same
observations, masks, graphs, global states, rewards, calls, targets and accuracy, round by round.
Forked replicas keep what was played and redraw only what is still to come."""
from __future__ import annotations

import numpy as np
import pytest

from topo_env.frontends.env_config import EnvConfig
from topo_env.frontends.parallel_env import TopologyParallelEnv
from topo_env.frontends.observation import ObservationBuilder, agreement
from topo_env.frontends.vector_env import SimVectorEnv

SETTINGS = [
    {},
    {"profile": "humaneval", "reward_mode": "shaped"},
    {"adversary_position": "random", "n_adversaries": 1, "rounds": 3},
    {"profile": "mmlu_pro_mixed", "n_agents": 4, "disabled_actions": ["debate_check"]},
    {"profile": "aime25", "team": ["gpt-oss-120b", "qwen3-32b", "llama-3.3-70b"]},
]


def play_both(config: EnvConfig, seeds: list[int], split: str = "train", seed: int = 0):
    """The vector env's steps for random valid joint actions, and the actions."""
    rng = np.random.default_rng(seed)
    valid = [a for a in range(6) if a not in config.disabled_actions]
    actions = rng.choice(valid, (len(seeds), config.rounds, config.n_agents))
    venv = SimVectorEnv(config)
    steps = [venv.reset(seeds, split)]
    for t in range(config.rounds):
        steps.append(venv.step(actions[:, t]))
    return venv, steps, actions


@pytest.mark.parametrize("setting", SETTINGS, ids=lambda s: ",".join(f"{k}={v}" for k, v in s.items()) or "default")
def test_every_episode_is_the_pettingzoo_envs_episode(setting):
    config = EnvConfig.from_dict(setting)
    seeds = list(range(500, 540))
    venv, steps, actions = play_both(config, seeds)
    env = TopologyParallelEnv(config)
    names = env.possible_agents
    for b, seed in enumerate(seeds):
        obs, infos = env.reset(seed=seed, options={"split": "train"})
        for t, step in enumerate(steps):
            np.testing.assert_array_equal(np.stack([obs[a]["observation"] for a in names]), step.observations[b])
            np.testing.assert_array_equal(np.stack([obs[a]["action_mask"] for a in names]).astype(bool),
                                          step.action_mask[b])
            np.testing.assert_array_equal(np.stack([infos[a]["sent_to"] for a in names]), step.sent_to[b])
            np.testing.assert_array_equal(env.state(), step.state[b])
            assert [infos[a]["target"] for a in names] == step.targets[b].tolist()
            if t:
                assert rewards[names[0]] == step.rewards[b]
                assert [infos[a]["calls"] for a in names] == step.calls[b].tolist()
            if t < config.rounds:
                obs, rewards, terms, _, infos = env.step({a: int(actions[b, t, i]) for i, a in enumerate(names)})
        assert all(terms.values()) and steps[-1].terminated
        assert env.accuracy == venv.result.accuracy[b]
        assert infos[names[0]]["team_tokens"] == venv.result.tokens[b]
        assert tuple(np.flatnonzero(venv.episodes.adversaries[b])) == env.adversaries


def test_task_indices_and_eval_split_are_the_envs():
    config = EnvConfig()
    venv = SimVectorEnv(config)
    env = TopologyParallelEnv(config)
    episodes, tasks = venv.sample_episodes([3, 4], split="eval", task_indices=[17, 5])
    for seed, index, task in zip([3, 4], [17, 5], tasks):
        env.reset(seed=seed, options={"split": "eval", "task": index})
        assert env.task == task
    assert episodes.buckets == tuple(t.hidden["bucket"] for t in tasks)


def test_fork_keeps_the_past_and_redraws_the_future():
    config = EnvConfig(rounds=2)
    venv = SimVectorEnv(config)
    first = venv.reset(list(range(8)), "train")
    actions = np.tile(np.array([[0, 3, 0]]), (8, 1))
    after_one = venv.step(actions)
    copies = 5
    forked = venv.fork(copies, np.random.default_rng(12345))
    rows = np.repeat(np.arange(8), copies)
    # the past: tasks, round-1 outputs and noise, and what the agents see now
    np.testing.assert_array_equal(forked.episodes.tasks.latent, venv.episodes.tasks.latent[rows])
    np.testing.assert_array_equal(forked.episodes.noise.calls[:, 0], venv.episodes.noise.calls[rows, 0])
    np.testing.assert_array_equal(forked.episodes.noise.blind, venv.episodes.noise.blind[rows])
    np.testing.assert_array_equal(forked.last_outputs.label, venv.last_outputs.label[rows])
    assert forked.round == 1 and venv.round == 1
    # the future: round 2's and the decision's noise are new for every copy
    assert not np.isin(forked.episodes.noise.calls[:, 1], venv.episodes.noise.calls[:, 1]).any()
    assert len(np.unique(forked.episodes.noise.decision[:, 0])) == 8 * copies
    # the fork plays on by itself; the original is untouched and plays on too
    end = forked.step(np.repeat(actions, copies, axis=0))
    assert end.terminated and end.rewards.shape == (8 * copies,) and venv.result is None
    assert venv.step(actions).terminated
    # before round 1 a fork is another task that reads the same: fresh latent and blind spots
    venv.reset(list(range(8)), "train")
    fresh = venv.fork(copies, np.random.default_rng(54321))
    e, f = venv.episodes, fresh.episodes
    for field in ("subject", "difficulty", "prompt_tokens"):
        np.testing.assert_array_equal(getattr(f.tasks, field), getattr(e.tasks, field)[rows])
    np.testing.assert_array_equal(f.adversaries, e.adversaries[rows])
    assert not np.isin(f.tasks.latent, e.tasks.latent).any() and not np.isin(f.noise.blind, e.noise.blind).any()
    text = slice(0, venv.obs_builder.task_dim)  # the task text's embedding and length
    np.testing.assert_array_equal(fresh.step(np.repeat(actions, copies, axis=0)).observations[:, :, text],
                                  np.repeat(after_one.observations[:, :, text], copies, axis=0))
    assert first.observations.shape == (8, 3, venv.obs_builder.dim)


def test_privileged_features_name_the_hidden_variables():
    config = EnvConfig(adversary_position="random", n_adversaries=1)
    venv = SimVectorEnv(config)
    venv.reset(list(range(50)), "train")
    p, e = venv.privileged(), venv.episodes
    s = len(venv.profile.subjects)
    assert p.shape == (50, venv.privileged_dim) == (50, s + 2 + 2 * 3)
    np.testing.assert_array_equal(p[:, :s].argmax(axis=1), e.tasks.subject)
    np.testing.assert_allclose(p[:, s], e.tasks.difficulty, rtol=1e-6)
    np.testing.assert_allclose(p[:, s + 1], e.tasks.latent, rtol=1e-6)
    np.testing.assert_array_equal(p[:, s + 2:s + 5].astype(bool), e.adversaries)
    np.testing.assert_allclose(p[:, s + 5:], e.noise.blind, rtol=1e-6)


def test_bad_use_is_named():
    venv = SimVectorEnv(EnvConfig(disabled_actions=["broadcast_all"]))
    with pytest.raises(RuntimeError, match="reset"):
        venv.step(np.zeros((2, 3), int))
    venv.reset([1, 2])
    with pytest.raises(ValueError, match=r"shape \(B, N\) = \(2, 3\)"):
        venv.step(np.zeros((3, 3), int))
    with pytest.raises(ValueError, match="action 1 is masked out"):
        venv.step(np.ones((2, 3), int))
    venv.step(np.zeros((2, 3), int))
    venv.step(np.zeros((2, 3), int))
    with pytest.raises(RuntimeError, match="after the last round"):
        venv.step(np.zeros((2, 3), int))
    with pytest.raises(RuntimeError, match="rounds still to play"):
        venv.fork(2, np.random.default_rng(0))
    with pytest.raises(ValueError, match="simulated team"):
        SimVectorEnv(EnvConfig.from_dict({"domain": "reasoning", "backend": {
            "kind": "llm", "model": "m", "base_url": "http://127.0.0.1:1/v1", "dataset": "mmlu_pro_sample"}}))


def test_agreement_counts_the_plurality_first_given():
    """Derived by hand: the most common answer, ties to the one given first; missing answers agree
    with nobody."""
    codes = np.array([[0, 0, 1], [0, 1, 1], [0, 1, 2], [-1, 0, 0], [-1, -1, -1], [2, 5, 2]])
    agrees, peers = agreement(codes)
    np.testing.assert_array_equal(agrees, [[1, 1, 0], [0, 1, 1], [1, 0, 0], [0, 1, 1], [0, 0, 0], [1, 0, 1]])
    np.testing.assert_array_equal(peers, [[.5, .5, 0], [0, .5, .5], [0, 0, 0], [0, .5, .5], [0, 0, 0], [.5, 0, .5]])


def test_build_batch_rows_are_one_episode_builds():
    builder = ObservationBuilder(3, 2, ("specialist", "specialist", "analyzer"), 16, 10000, ("a", "b", "c"))
    rng = np.random.default_rng(0)
    templates = builder.episode_templates(rng.random((4, 16)), np.array([100, 250, 80, 40]))
    answers = [["A", "B", "A"], [None, None, None], ["C", "C", "C"], ["A", None, "B"]]
    codes = np.array([[0, 1, 0], [-1, -1, -1], [0, 0, 0], [0, -1, 1]])
    confidences = [[0.9, 0.4, 0.7], [None, None, None], [0.5, 0.6, 0.7], [0.8, None, 0.3]]
    args = dict(agent_tokens=rng.integers(0, 3000, (4, 3)), team_tokens=rng.integers(0, 9000, 4),
                in_degree=rng.integers(0, 3, (4, 3)), out_degree=rng.integers(0, 3, (4, 3)),
                verdicts=rng.integers(-1, 2, (4, 3)), prev_actions=rng.integers(0, 6, (4, 3)))
    batch = builder.build_batch(templates, 1, args["prev_actions"], args["agent_tokens"], args["team_tokens"],
                                args["in_degree"], args["out_degree"], codes,
                                np.array([[0.0 if c is None else c for c in row] for row in confidences]),
                                args["verdicts"])
    for b in range(4):
        one = builder.build(templates[b], 1, list(args["prev_actions"][b]), list(args["agent_tokens"][b]),
                            int(args["team_tokens"][b]), list(args["in_degree"][b]), list(args["out_degree"][b]),
                            answers[b], confidences[b], list(args["verdicts"][b]))
        np.testing.assert_array_equal(batch[b], one)
    adjacency = rng.integers(0, 2, (4, 3, 3))
    states = builder.state_batch(batch, adjacency, 1)
    for b in range(4):
        np.testing.assert_array_equal(states[b], builder.state(batch[b], adjacency[b], 1))
    assert states[0, -1] == 0.5 and states[0, 3 * builder.dim] == adjacency[0].sum()
