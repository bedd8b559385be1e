"""The orchestrator env: Gymnasium's checker, the same episodes as the PettingZoo env for every
graph the six CommActions express, the next-agent mode, and bad input."""
import itertools
import pickle

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import topo_env
from topo_env.frontends.parallel_env import comm_round_spec

CONFIGS = {
    "mmlu_pro": dict(profile="mmlu_pro", rounds=2),
    "humaneval_verify_shaped": dict(profile="humaneval", rounds=2, reward_mode="shaped", target_rule="confident"),
    "aime25_n4_adversary": dict(profile="aime25", rounds=3, n_agents=4, adversarial_agents=[1]),
}


@pytest.mark.parametrize("mode", ["graph", "next_agent"])
@pytest.mark.parametrize("cfg", CONFIGS.values(), ids=CONFIGS.keys())
def test_gymnasium_check_env(mode, cfg):
    env = topo_env.orchestrator_env(mode=mode, render_mode="ansi", **cfg)
    check_env(env, skip_render_check=False)


def _graph_action(spec, halt):
    return {"adjacency": spec.adjacency.astype(np.int8), "active": spec.active.astype(np.int8),
            "verify": spec.verify.astype(np.int8), "halt": int(halt)}


def _play_both(cfg, seed, joint_actions):
    """Play ``joint_actions`` (one per round) in the PettingZoo env, and the RoundSpecs they made
    in the orchestrator env on the same seed; return both sides' per-round records."""
    pz = topo_env.parallel_env(render_mode="ansi", **cfg)
    orch = topo_env.orchestrator_env(render_mode="ansi", **cfg)
    pz.reset(seed=seed)
    o_obs, _ = orch.reset(seed=seed)
    assert pz.task == orch.episode.task
    rows = []
    for t, acts in enumerate(joint_actions):
        obs, rew, term, _, infos = pz.step({f"agent_{i}": int(a) for i, a in enumerate(acts)})
        spec = pz.history[-1].spec
        made = comm_round_spec([int(a) for a in acts], list(pz.history[-1].targets))
        np.testing.assert_array_equal(spec.adjacency, made.adjacency)
        np.testing.assert_array_equal(spec.verify, made.verify)
        last = t == len(joint_actions) - 1
        o_obs, o_rew, o_term, o_trunc, o_info = orch.step(_graph_action(spec, halt=last))
        rows.append((rew["agent_0"], o_rew, term["agent_0"], o_term, infos, o_info, obs, o_obs, spec.adjacency))
    return pz, orch, rows


def _assert_same(pz, orch, rows):
    n = pz.n_agents
    for rew, o_rew, term, o_term, infos, o_info, obs, o_obs, graph in rows:
        assert rew == o_rew and term == o_term
        for key in ("team_tokens", "edges", "density", "accuracy", "tokens_estimated"):
            assert infos["agent_0"][key] == o_info[key], key
        for key in ("calls", "round_tokens", "in_degree", "out_degree"):
            assert [infos[f"agent_{i}"][key] for i in range(n)] == o_info[key].tolist(), key
        task, agents = pz.obs_builder.controller_view(
            np.stack([obs[f"agent_{i}"]["observation"] for i in range(n)]), [True] * n, [True] * n)
        np.testing.assert_array_equal(task, o_obs["task"])
        np.testing.assert_array_equal(agents, o_obs["agents"])
        np.testing.assert_array_equal(graph.astype(np.int8), o_obs["adjacency"])
    assert pz.episode.team_tokens == orch.episode.team_tokens and pz.accuracy == orch.episode.accuracy
    assert [c.reply for r in pz.history for c in r.calls] == [c.reply for r in orch.episode.history for c in r.calls]


def test_every_first_round_graph_scores_the_same_through_both_front_ends():
    """All 216 joint actions of a 3-agent team as round 1 (round 2 random), several seeds."""
    cfg = CONFIGS["humaneval_verify_shaped"]
    rng = np.random.default_rng(0)
    for k, first in enumerate(itertools.product(range(6), repeat=3)):
        pz, orch, rows = _play_both(cfg, seed=k % 7, joint_actions=[first, tuple(rng.integers(6, size=3))])
        _assert_same(pz, orch, rows)


@pytest.mark.parametrize("cfg", CONFIGS.values(), ids=CONFIGS.keys())
def test_random_comm_action_episodes_score_the_same_through_both_front_ends(cfg):
    rng = np.random.default_rng(1)
    n = cfg.get("n_agents", 3)
    for seed in range(40):
        acts = [tuple(rng.integers(6, size=n)) for _ in range(cfg["rounds"])]
        pz, orch, rows = _play_both(cfg, seed, acts)
        _assert_same(pz, orch, rows)


def test_halt_ends_early_and_reports_it():
    env = topo_env.orchestrator_env(profile="aime25", rounds=3)
    env.reset(seed=3)
    n = env.n_agents
    _, reward, terminated, truncated, info = env.step(
        {"adjacency": np.zeros((n, n), np.int8), "active": np.ones(n, np.int8), "verify": np.zeros(n, np.int8),
         "halt": 1})
    assert terminated and not truncated and info["halted"] == 1 and env.episode.round == 1
    assert reward == pytest.approx(env.episode.episode_reward)
    with pytest.raises(RuntimeError, match="reset"):
        env.step(env.action_space.sample())


def test_graph_mode_activates_agents_that_send_receive_or_verify():
    env = topo_env.orchestrator_env(profile="humaneval", rounds=2, render_mode="ansi")
    env.reset(seed=0)
    adj = np.zeros((3, 3), np.int8)
    adj[0, 1] = 1
    adj[2, 2] = 1  # the diagonal is ignored
    _, _, _, _, info = env.step({"adjacency": adj, "active": np.zeros(3, np.int8),
                                 "verify": np.array([0, 0, 1], np.int8), "halt": 0})
    spec = env.episode.history[-1].spec
    assert spec.active.tolist() == [True, True, True] and spec.edges() == [(0, 1)]
    assert info["calls"].tolist() == [1, 1, 1]
    assert env.episode.history[-1].finals[2].verdict != 0 and "verifier on agent_2" in env.render()
    assert env.episode.history[-1].finals[0].verdict == 0


def test_next_agent_mode_shows_every_output_so_far():
    env = topo_env.orchestrator_env(mode="next_agent", profile="mmlu_pro", rounds=4)
    obs, _ = env.reset(seed=2)
    assert obs["round"] == 0 and not obs["agents"][:, -2].any()
    env.step(2)
    env.step(0)
    obs, _, terminated, _, info = env.step(2)
    calls = [c for r in env.episode.history for c in r.calls]
    assert [c.agent for c in calls] == [2, 0, 2]
    assert calls[0].received == () and calls[1].received == ((2, "solo"),)
    assert calls[2].received == ((0, "solo"),) and calls[2].had_previous  # its own output as previous
    assert obs["agents"][:, -2].tolist() == [1, 0, 1] and obs["round"] == 3 and not terminated
    assert info["calls"].tolist() == [0, 0, 1] and obs["adjacency"][0, 2] == 1
    _, reward, terminated, _, info = env.step(3)  # stop
    assert terminated and info["halted"] == 1 and env.episode.round == 3
    assert reward == pytest.approx(env.episode.episode_reward)


def test_next_agent_stop_before_anyone_spoke_lets_the_decision_node_answer_alone():
    env = topo_env.orchestrator_env(mode="next_agent", profile="mmlu_pro", rounds=2)
    env.reset(seed=5)
    _, reward, terminated, _, info = env.step(3)
    assert terminated and env.episode.round == 0 and env.episode.decision is not None
    assert info["team_tokens"] == env.episode.decision.reply.total_tokens > 0


@pytest.mark.parametrize("action, message", [
    ({"adjacency": np.zeros((3, 3), np.int8)}, r"keys \['active', 'adjacency', 'halt', 'verify'\]"),
    ({"adjacency": np.zeros((2, 2), np.int8), "active": np.ones(3, np.int8), "verify": np.zeros(3, np.int8),
      "halt": 0}, r"action\['adjacency'\] has shape \(2, 2\)"),
    ({"adjacency": np.zeros((3, 3), np.int8), "active": np.full(3, 2), "verify": np.zeros(3, np.int8),
      "halt": 0}, r"action\['active'\] holds 2"),
    ({"adjacency": np.zeros((3, 3), np.int8), "active": np.ones(3, np.int8), "verify": np.zeros(3),
      "halt": 0}, r"action\['verify'\] has dtype float64"),
    ({"adjacency": np.zeros((3, 3), np.int8), "active": np.ones(3, np.int8), "verify": np.zeros(3, np.int8),
      "halt": 2}, r"action\['halt'\] is 2"),
    (4, r"must be a dict"),
])
def test_bad_graph_actions_name_the_value_and_change_nothing(action, message):
    env = topo_env.orchestrator_env(profile="mmlu_pro", rounds=2)
    env.reset(seed=0)
    before = (env.episode.round, env.episode.team_tokens, len(env.episode.history))
    with pytest.raises(ValueError, match=message):
        env.step(action)
    assert (env.episode.round, env.episode.team_tokens, len(env.episode.history)) == before


@pytest.mark.parametrize("action", [-1, 4, 1.5, True, "0"])
def test_bad_next_agent_actions(action):
    env = topo_env.orchestrator_env(mode="next_agent", profile="mmlu_pro", rounds=2)
    env.reset(seed=0)
    with pytest.raises(ValueError, match=r"agent index 0..2 or 3 \(stop\)"):
        env.step(action)
    assert env.episode.round == 0


def test_bad_config_and_mode():
    with pytest.raises(topo_env.ConfigError, match="mode='tree'"):
        topo_env.orchestrator_env(mode="tree")
    with pytest.raises(topo_env.ConfigError, match="disabled_actions"):
        topo_env.orchestrator_env(disabled_actions=["debate_check"])


def test_seeded_resets_repeat_and_the_env_pickles():
    env = topo_env.orchestrator_env(profile="mmlu_pro", rounds=2)
    a, _ = env.reset(seed=9)
    b, _ = env.reset(seed=9)
    for key in a:
        np.testing.assert_array_equal(a[key], b[key])
    clone = pickle.loads(pickle.dumps(env))
    action = {"adjacency": np.ones((3, 3), np.int8), "active": np.ones(3, np.int8), "verify": np.zeros(3, np.int8),
              "halt": 0}
    assert env.step(action)[1:3] == clone.step(action)[1:3]
