"""The PettingZoo contract of the topology env, its rewards, episode end, determinism,
reset options, rendering and pickling."""
from __future__ import annotations

import math
import pickle
import warnings

import numpy as np
import pytest
from pettingzoo.test import parallel_api_test, parallel_seed_test
from pettingzoo.utils.conversions import parallel_to_aec

from topo_env import Task, parallel_env
from topo_env.frontends.parallel_env import INFO_KEYS

try:
    from pettingzoo.test.state_test import state_test
except ImportError:  # pragma: no cover - depends on the PettingZoo version
    state_test = None

CONFIGS = {
    "default": {},
    "n5_r3_shaped_adv": dict(n_agents=5, rounds=3, reward_mode="shaped", adversarial_agents=[1, 3]),
}
REQUIRED_INFO = {"calls", "round_tokens", "team_tokens", "edges", "density", "accuracy"}


def random_actions(env, rng):
    return {a: int(rng.integers(0, 6)) for a in env.agents}


def play(env, seed, actions_per_round, options=None):
    """Reset and play; returns (reset obs, reset infos, [step results])."""
    obs, infos = env.reset(seed=seed, options=options)
    steps = [env.step(acts) for acts in actions_per_round]
    return obs, infos, steps


def same(a, b):
    """Deep equality of nested dicts / lists / arrays / scalars (exact)."""
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b)
    return type(a) is type(b) and a == b


# ---------------------------------------------------------------------------------------
# PettingZoo's own tests
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("cfg", CONFIGS.values(), ids=CONFIGS.keys())
def test_pettingzoo_parallel_api_test(cfg):
    env = parallel_env(**cfg)
    try:
        parallel_api_test(env, num_cycles=10)
    except ValueError as e:
        pytest.fail(
            "BUG topo_env/frontends/parallel_env.py reset(): PettingZoo's parallel_api_test calls "
            f"reset(seed=0, options={{'options': 1}}) and the env raises: {e}"
        )


@pytest.mark.parametrize("cfg", CONFIGS.values(), ids=CONFIGS.keys())
def test_pettingzoo_parallel_api_test_with_disabled_actions(cfg):
    """PettingZoo's API test on the env itself when actions are masked out (its masked sampling)."""
    env = parallel_env(disabled_actions=["debate_check", "broadcast_all"], **cfg)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r".*reset\(\) ignores unknown option")  # the test's options={'options': 1}
        parallel_api_test(env, num_cycles=10)


@pytest.mark.parametrize("cfg", CONFIGS.values(), ids=CONFIGS.keys())
def test_pettingzoo_parallel_seed_test(cfg):
    parallel_seed_test(lambda: parallel_env(**cfg), num_cycles=10)


@pytest.mark.parametrize("cfg", CONFIGS.values(), ids=CONFIGS.keys())
def test_pettingzoo_state_test(cfg):
    assert state_test is not None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # unbounded Box: PettingZoo only warns about it
        state_test(parallel_to_aec(parallel_env(**cfg)), parallel_env(**cfg), num_cycles=10)


@pytest.mark.parametrize("cfg", CONFIGS.values(), ids=CONFIGS.keys())
def test_state_every_step(cfg):
    env = parallel_env(**cfg)
    n, rounds = env.n_agents, env.rounds
    rng = np.random.default_rng(0)
    for seed in range(3):
        env.reset(seed=seed)
        for t in range(rounds + 1):
            s = env.state()
            assert isinstance(s, np.ndarray) and s.dtype == np.float32
            assert s.shape == env.state_space.shape == (env.obs_builder.state_dim,)
            assert env.state_space.contains(s)
            assert np.isfinite(s).all()
            # tail layout: edges, density, N, flattened last adjacency, t / T
            adj = env.adjacency
            tail = s[n * env.obs_builder.dim :]
            assert tail[0] == np.count_nonzero(adj)
            assert tail[1] == pytest.approx(np.count_nonzero(adj) / (n * (n - 1)))
            assert tail[2] == n
            np.testing.assert_array_equal(tail[3 : 3 + n * n], adj.reshape(-1))
            assert tail[-1] == pytest.approx(t / rounds)
            if t < rounds:
                env.step(random_actions(env, rng))


def test_state_before_reset():
    with pytest.raises(RuntimeError, match="reset"):
        parallel_env().state()


# ---------------------------------------------------------------------------------------
# spaces and observations
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("cfg", CONFIGS.values(), ids=CONFIGS.keys())
def test_spaces_and_observations(cfg):
    env = parallel_env(**cfg)
    d = env.obs_builder.dim
    spaces_ = [env.observation_space(a) for a in env.possible_agents]
    for a in env.possible_agents:
        assert env.observation_space(a) is env.observation_space(a)
        assert env.action_space(a) is env.action_space(a)
        assert env.observation_space(a) == spaces_[0]
        assert env.action_space(a) == env.action_space(env.possible_agents[0])
        assert env.action_space(a).n == 6
    rng = np.random.default_rng(0)
    obs, _ = env.reset(seed=0)
    while True:
        assert set(obs) == set(env.possible_agents)
        for a, o in obs.items():
            assert set(o) == {"observation", "action_mask"}
            assert o["observation"].dtype == np.float32 and o["observation"].shape == (d,)
            assert o["action_mask"].dtype == np.int8 and o["action_mask"].shape == (6,)
            assert env.observation_space(a).contains(o)
        if not env.agents:
            break
        obs, *_ = env.step(random_actions(env, rng))


def test_observations_differ_between_agents():
    env = parallel_env()
    obs, _ = env.reset(seed=0)
    assert not np.array_equal(obs["agent_0"]["observation"], obs["agent_1"]["observation"])  # agent id one-hot


def test_identity_block_shows_agent_role_and_persona():
    """Agent id, role kind and persona are explicit in the config and one-hot in every
    observation; a persona outside the built-in vocabulary takes the last persona slot."""
    from topo_env.engine.roles import PERSONA_VOCAB, ROLE_KINDS

    n, e = 3, 16
    id_start = e + 1
    role_start = id_start + n
    persona_start = role_start + len(ROLE_KINDS)
    width = len(PERSONA_VOCAB) + 1

    env = parallel_env(profile="humaneval", embed_dim=e)  # code team, default personas
    assert env.config.personas == ("project manager", "algorithm designer", "critical reviewer")
    obs, _ = env.reset(seed=0)
    for i, name in enumerate(env.possible_agents):
        o = obs[name]["observation"]
        assert o[id_start : id_start + n].tolist() == [1.0 * (k == i) for k in range(n)]
        assert o[role_start : persona_start].tolist() == [1.0 * (r == env.config.roles[i]) for r in ROLE_KINDS]
        persona = o[persona_start : persona_start + width]
        assert persona.sum() == 1.0 and persona[PERSONA_VOCAB.index(env.config.personas[i])] == 1.0

    custom = parallel_env(profile="humaneval", embed_dim=e, personas=["bug fixer", "security auditor", "inspector"])
    obs, _ = custom.reset(seed=0)
    blocks = [obs[a]["observation"][persona_start : persona_start + width] for a in custom.possible_agents]
    assert blocks[0][PERSONA_VOCAB.index("bug fixer")] == 1.0
    assert blocks[1][-1] == 1.0 and blocks[1].sum() == 1.0  # not in the vocabulary: the "other" slot
    assert blocks[2][PERSONA_VOCAB.index("inspector")] == 1.0
    assert custom.config.to_dict()["personas"] == ["bug fixer", "security auditor", "inspector"]


def test_unknown_agent_space():
    env = parallel_env()
    with pytest.raises(ValueError, match="agent_9"):
        env.observation_space("agent_9")
    with pytest.raises(ValueError, match="agent_9"):
        env.action_space("agent_9")


def test_disabled_actions_mask():
    env = parallel_env(disabled_actions=["debate_check"])
    obs, infos = env.reset(seed=0)
    for a in env.possible_agents:
        assert obs[a]["action_mask"].tolist() == [1, 1, 1, 1, 1, 0]
        assert "action_mask" not in infos[a]  # the mask lives in the observation only
    obs, _, _, _, infos = env.step({a: 1 for a in env.agents})
    assert all(obs[a]["action_mask"][5] == 0 for a in env.possible_agents)
    env2 = parallel_env(disabled_actions=[0, "aggregate_refine"])
    obs, _ = env2.reset(seed=0)
    assert obs["agent_2"]["action_mask"].tolist() == [0, 1, 1, 0, 1, 1]
    # the mask handed out is a copy: changing it does not change the env
    obs["agent_0"]["action_mask"][:] = 0
    obs, _ = env2.reset(seed=0)
    assert obs["agent_0"]["action_mask"].tolist() == [0, 1, 1, 0, 1, 1]


# ---------------------------------------------------------------------------------------
# determinism
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("cfg", CONFIGS.values(), ids=CONFIGS.keys())
def test_same_seed_same_episode(cfg):
    rng = np.random.default_rng(1)
    n, rounds = parallel_env(**cfg).n_agents, parallel_env(**cfg).rounds
    acts = [{f"agent_{i}": int(x) for i, x in enumerate(rng.integers(0, 6, n))} for _ in range(rounds)]
    e1, e2 = parallel_env(render_mode="ansi", **cfg), parallel_env(render_mode="ansi", **cfg)
    r1, r2 = play(e1, 11, acts), play(e2, 11, acts)
    assert same(r1, r2)
    assert e1.task == e2.task
    assert e1.render() == e2.render()
    # the same env, reset with the same seed again, repeats itself
    r3 = play(e1, 11, acts)
    assert same(r1, r3)
    assert e1.transcript() == e2.transcript()


def test_different_seed_different_task():
    env = parallel_env()
    ids = set()
    for seed in range(5):
        env.reset(seed=seed)
        ids.add(env.task.id)
    assert len(ids) == 5


def test_reset_without_seed_continues_the_stream():
    env = parallel_env()
    env.reset(seed=0)
    first = env.task.id
    env.reset()
    assert env.task.id != first


# ---------------------------------------------------------------------------------------
# rewards and episode end
# ---------------------------------------------------------------------------------------


def expected_reward(cfg, info):
    w_acc, w_tok, max_tok = cfg.get("w_acc", 1.25), cfg.get("w_tok", 0.10), cfg.get("max_tokens", 10000)
    return w_acc * info["accuracy"] - w_tok * min(info["team_tokens"] / max_tok, 1.0)


@pytest.mark.parametrize(
    "cfg",
    [{}, dict(n_agents=5, rounds=3, adversarial_agents=[0]), dict(max_tokens=500, w_acc=2.0, w_tok=0.3),
     dict(profile="aime25", rounds=3, w_tok=0.0)],
)
def test_sparse_rewards(cfg):
    env = parallel_env(**cfg)
    rng = np.random.default_rng(2)
    accs = set()
    for seed in range(20):
        env.reset(seed=seed)
        for t in range(env.rounds):
            _, rew, term, trunc, infos = env.step(random_actions(env, rng))
            assert set(rew) == set(env.possible_agents)
            if t < env.rounds - 1:
                assert all(r == 0.0 for r in rew.values())
                assert not any(term.values()) and not any(trunc.values())
                assert all(i["accuracy"] == 0.0 for i in infos.values())
            else:
                want = expected_reward(cfg, infos["agent_0"])
                for a in env.possible_agents:
                    assert math.isclose(rew[a], want, rel_tol=0, abs_tol=1e-12)
                    assert infos[a]["accuracy"] == infos["agent_0"]["accuracy"]
                acc = infos["agent_0"]["accuracy"]
                accs.add(acc)
                assert acc == env.decision.accuracy
                assert acc == (1.0 if env.decision.reply.answer == env.task.reference else 0.0)
    assert accs <= {0.0, 1.0}


def test_token_penalty_is_capped():
    env = parallel_env(max_tokens=100, w_tok=0.5, w_acc=1.0)
    env.reset(seed=0)
    env.step({a: 1 for a in env.agents})
    _, rew, _, _, infos = env.step({a: 1 for a in env.agents})
    assert infos["agent_0"]["team_tokens"] > 100
    assert rew["agent_0"] == pytest.approx(infos["agent_0"]["accuracy"] - 0.5, abs=1e-12)


@pytest.mark.parametrize("cfg", [{}, dict(n_agents=5, rounds=3, adversarial_agents=[2]), dict(max_tokens=3000)])
def test_shaped_sums_to_sparse(cfg):
    rng = np.random.default_rng(3)
    sparse = parallel_env(reward_mode="sparse", **cfg)
    shaped = parallel_env(reward_mode="shaped", **cfg)
    for seed in range(15):
        acts = [{f"agent_{i}": int(x) for i, x in enumerate(rng.integers(0, 6, sparse.n_agents))}
                for _ in range(sparse.rounds)]
        _, _, s1 = play(sparse, seed, acts)
        _, _, s2 = play(shaped, seed, acts)
        for a in sparse.possible_agents:
            ret_sparse = sum(step[1][a] for step in s1)
            ret_shaped = sum(step[1][a] for step in s2)
            assert math.isclose(ret_sparse, ret_shaped, rel_tol=0, abs_tol=1e-12), (seed, ret_sparse, ret_shaped)
            assert all(step[1][a] <= 0.0 for step in s2[:-1])
        # apart from rewards, the two modes run the same episode
        assert same([st[4] for st in s1], [st[4] for st in s2])


def test_shaped_intermediate_rewards_are_token_penalties():
    cfg = dict(n_agents=4, rounds=3, reward_mode="shaped", max_tokens=10**6, w_tok=0.2)
    env = parallel_env(**cfg)
    rng = np.random.default_rng(4)
    for seed in range(10):
        env.reset(seed=seed)
        prev_tokens = 0
        for t in range(3):
            _, rew, _, _, infos = env.step(random_actions(env, rng))
            tokens = infos["agent_0"]["team_tokens"]
            step_penalty = 0.2 * (tokens - prev_tokens) / 10**6
            if t < 2:
                assert rew["agent_0"] < 0
                assert math.isclose(rew["agent_0"], -step_penalty, rel_tol=1e-9)
            else:
                want = 1.25 * infos["agent_0"]["accuracy"] - step_penalty
                assert math.isclose(rew["agent_0"], want, rel_tol=1e-9, abs_tol=1e-12)
            prev_tokens = tokens


@pytest.mark.parametrize("cfg", CONFIGS.values(), ids=CONFIGS.keys())
def test_episode_end(cfg):
    env = parallel_env(**cfg)
    rng = np.random.default_rng(5)
    obs, infos = env.reset(seed=0)
    assert env.agents == env.possible_agents
    assert set(infos["agent_0"]) == set(INFO_KEYS) and REQUIRED_INFO <= set(INFO_KEYS)
    for t in range(env.rounds):
        assert env.agents == env.possible_agents
        obs, rew, term, trunc, infos = env.step(random_actions(env, rng))
        last = t == env.rounds - 1
        assert set(term) == set(trunc) == set(rew) == set(env.possible_agents)
        assert all(v is last for v in term.values())
        assert all(v is False for v in trunc.values())
        assert set(infos) == set(env.possible_agents)
        for a in env.possible_agents:
            assert set(infos[a]) == set(INFO_KEYS)
    assert env.agents == []
    with pytest.raises(RuntimeError):
        env.step({a: 0 for a in env.possible_agents})


def test_info_values():
    env = parallel_env(n_agents=3, rounds=2)
    _, infos = env.reset(seed=0)
    for a in env.possible_agents:
        i = infos[a]
        assert (i["calls"], i["round_tokens"], i["team_tokens"], i["edges"], i["density"], i["accuracy"]) == (
            0, 0, 0, 0, 0.0, 0.0)
    # agent 0 broadcasts: 2 edges, agent 0 out-degree 2
    _, _, _, _, infos = env.step({"agent_0": 1, "agent_1": 0, "agent_2": 0})
    assert infos["agent_0"]["edges"] == 2 and infos["agent_0"]["density"] == pytest.approx(2 / 6)
    assert infos["agent_0"]["out_degree"] == 2 and infos["agent_0"]["in_degree"] == 0
    assert infos["agent_1"]["in_degree"] == 1 and infos["agent_2"]["in_degree"] == 1
    assert [infos[a]["calls"] for a in env.possible_agents] == [1, 1, 1]
    total = sum(infos[a]["round_tokens"] for a in env.possible_agents)
    assert all(infos[a]["team_tokens"] == total > 0 for a in env.possible_agents)
    # a debate pair makes two calls each
    _, _, _, _, infos = env.step({"agent_0": 5, "agent_1": 0, "agent_2": 0})
    calls = [infos[a]["calls"] for a in env.possible_agents]
    assert sorted(calls) == [1, 2, 2] and calls[0] == 2


# ---------------------------------------------------------------------------------------
# reset options
# ---------------------------------------------------------------------------------------


def test_reset_task_index():
    env = parallel_env()
    env.reset(seed=0, options={"task": 7, "split": "eval"})
    t1 = env.task
    env.reset(seed=123, options={"task": 7, "split": "eval"})
    assert env.task == t1
    assert t1 == env.backend.tasks.task("eval", 7)
    env.reset(seed=0, options={"task": 7})  # default split train: a different task
    assert env.task != t1
    assert env.task == env.backend.tasks.task("train", 7)
    env.reset(seed=0, options={"task": np.int64(7), "split": "eval"})
    assert env.task == t1


def test_reset_task_object():
    env = parallel_env()
    task = env.backend.tasks.task("eval", 3)
    custom = Task(id="custom-1", domain=task.domain, prompt="A custom prompt about law.", reference=task.reference,
                  metadata=dict(task.metadata), hidden=dict(task.hidden))
    env.reset(seed=0, options={"task": custom})
    assert env.task is custom
    env.step({a: 0 for a in env.agents})
    env.step({a: 0 for a in env.agents})
    assert env.decision is not None
    assert "custom-1" in env.transcript()


def test_reset_task_and_seed_fix_the_episode():
    env = parallel_env()
    acts = [{a: 3 for a in env.possible_agents}, {a: 2 for a in env.possible_agents}]
    r1 = play(env, 5, acts, options={"task": 7, "split": "eval"})
    r2 = play(env, 5, acts, options={"task": 7, "split": "eval"})
    assert same(r1, r2)


# ---------------------------------------------------------------------------------------
# render
# ---------------------------------------------------------------------------------------


def test_render_ansi():
    env = parallel_env(render_mode="ansi", n_agents=3, rounds=3)
    env.reset(seed=0)
    text0 = env.render()
    assert isinstance(text0, str) and env.task.id in text0 and "== round" not in text0
    env.step({a: 1 for a in env.agents})
    env.step({"agent_0": 4, "agent_1": 5, "agent_2": 0})
    mid = env.render()
    assert "== round 1/3" in mid and "== round 2/3" in mid and "== round 3/3" not in mid
    assert "decision" not in mid
    env.step({a: 0 for a in env.agents})
    text = env.render()
    for r in (1, 2, 3):
        assert f"== round {r}/3" in text
    assert "== decision" in text and env.decision.reply.text in text
    assert "agent_1=debate_check" in text


def test_render_without_mode_returns_none():
    env = parallel_env()
    env.reset(seed=0)
    with pytest.warns(UserWarning, match="render_mode"):
        assert env.render() is None


# ---------------------------------------------------------------------------------------
# pickling
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("cfg", CONFIGS.values(), ids=CONFIGS.keys())
def test_pickle_mid_episode(cfg):
    env = parallel_env(render_mode="ansi", **cfg)
    rng = np.random.default_rng(6)
    acts = [{a: int(x) for a, x in zip(env.possible_agents, rng.integers(0, 6, env.n_agents))}
            for _ in range(env.rounds)]
    env.reset(seed=9)
    env.step(acts[0])
    copy = pickle.loads(pickle.dumps(env))
    assert copy is not env and copy.task == env.task and copy.round == env.round == 1
    np.testing.assert_array_equal(copy.state(), env.state())
    rest_a = [env.step(a) for a in acts[1:]]
    rest_b = [copy.step(a) for a in acts[1:]]
    assert same(rest_a, rest_b)
    assert copy.transcript() == env.transcript()
    assert copy.decision == env.decision
    # and both can start a new, identical episode
    assert same(env.reset(seed=1), copy.reset(seed=1))


def test_pickle_after_reset_equals_fresh_run():
    env = parallel_env()
    env.reset(seed=4)
    copy = pickle.loads(pickle.dumps(env))
    acts = {a: 1 for a in env.possible_agents}
    assert same(env.step(acts), copy.step(acts))


def test_minilm_encoder_observations():
    """With encoder="minilm" the task embedding is all-MiniLM-L6-v2's (384-d, offline): the
    observation grows accordingly, stays in its space and is deterministic."""
    env = parallel_env(encoder="minilm")
    obs, _ = env.reset(seed=3)
    first = obs["agent_0"]["observation"].copy()
    assert env.observation_space("agent_0")["observation"].shape == (env.obs_builder.dim,)
    hashed = parallel_env()  # embed_dim 64: the rest of the observation is the same
    assert env.obs_builder.dim - 384 == hashed.obs_builder.dim - 64
    assert env.encoder.dim == 384
    emb = first[:384]
    assert np.isclose(np.linalg.norm(emb), 1.0, atol=1e-4)
    assert env.observation_space("agent_0").contains(obs["agent_0"])
    while env.agents:
        env.step({a: 1 for a in env.agents})
    again, _ = env.reset(seed=3)
    np.testing.assert_array_equal(again["agent_0"]["observation"], first)


def test_the_episode_summary_comes_after_the_end_only():
    """``episode_summary()`` says what the episode was (task, bucket, adversaries) once it has ended
    and raises before, in both front-ends; the same seed gives the same summary in both."""
    from topo_env import orchestrator_env

    env = parallel_env(n_agents=3, rounds=2, adversary_position="random", n_adversaries=1)
    with pytest.raises(RuntimeError, match="once an episode has ended"):
        env.episode_summary()
    env.reset(seed=4)
    env.step({a: 1 for a in env.possible_agents})
    with pytest.raises(RuntimeError, match="once an episode has ended"):
        env.episode_summary()
    env.step({a: 1 for a in env.possible_agents})
    summary = env.episode_summary()
    assert summary["adversaries"] == tuple(env.adversaries) and len(summary["adversaries"]) == 1
    assert summary["task_id"] == env.task.id and summary["bucket"] == env.task.hidden["bucket"]
    assert summary["subject"] == env.task.metadata["subject"]

    orch = orchestrator_env(n_agents=3, rounds=2, adversary_position="random", n_adversaries=1)
    orch.reset(seed=4)
    with pytest.raises(RuntimeError):
        orch.episode_summary()
    *_, last, _, _ = orch.step(orch.action_space.sample() | {"halt": 1})
    assert last and orch.episode_summary() == summary
