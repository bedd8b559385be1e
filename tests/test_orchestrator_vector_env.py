"""The orchestrator env for B episodes at once on the batch simulator
(topo_env.frontends.orchestrator_vector_env): every row replays the one-episode orchestrator env (its documented
seed sequence), and the whole env equals gymnasium.vector.SyncVectorEnv over orchestrator_env for the same seeds
and actions across autoresets (halts and next-agent stops end rows at different rounds; recalls and verification
included); Gymnasium's vector wrappers run over it; bad actions are named and change nothing."""
from __future__ import annotations

import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from gymnasium.wrappers.vector import RecordEpisodeStatistics

import topo_env
from topo_env.frontends.env_config import EnvConfig
from topo_env.frontends.orchestrator_vector_env import OrchestratorVectorEnv, orchestrator_vector_env
from topo_env.sim.batch import BatchRoundSpec

CONFIGS = {
    "mmlu_pro_T3": dict(profile="mmlu_pro", rounds=3),
    "humaneval_shaped_random_adversary": dict(profile="humaneval", rounds=2, reward_mode="shaped",
                                              adversary_position="random", n_adversaries=1),
    "aime25_n4_vote": dict(profile="aime25", rounds=3, n_agents=4, decision="vote", adversarial_agents=[1]),
}
PER_EPISODE = {"task_text", "outputs"}  # Python objects the vector env leaves out


def random_actions(mode: str, b: int, n: int, steps: int, seed: int) -> list:
    """Random actions: graphs with halts, recalls, verification and inactive agents; or next agents with stops."""
    rng = np.random.default_rng(seed)
    if mode == "next_agent":
        return [rng.integers(0, n + 1, b) for _ in range(steps)]
    return [{"adjacency": (rng.random((b, n, n)) < 0.4).astype(np.int8),
             "active": (rng.random((b, n)) < 0.5).astype(np.int8),
             "verify": (rng.random((b, n)) < 0.25).astype(np.int8),
             "halt": (rng.random(b) < 0.3).astype(np.int64),
             "recall": (rng.random((b, n, n)) < 0.3).astype(np.int8)} for _ in range(steps)]


def row_action(action, b: int):
    return int(action[b]) if not isinstance(action, dict) else {k: v[b] for k, v in action.items()}


def numeric(infos: dict) -> dict:
    """Vector infos without the per-episode objects (recursively, in final_info too)."""
    return {k: numeric(v) if isinstance(v, dict) else v for k, v in infos.items()
            if k.lstrip("_") not in PER_EPISODE}


def assert_same_tree(a, b, where: str = "") -> None:
    """Equal tuples / dicts / arrays / object arrays of dicts, with equal dtypes for arrays."""
    if isinstance(a, tuple):
        assert isinstance(b, tuple) and len(a) == len(b), where
        for k, (x, y) in enumerate(zip(a, b)):
            assert_same_tree(x, y, f"{where}[{k}]")
    elif isinstance(a, dict):
        assert isinstance(b, dict) and sorted(a) == sorted(b), (where, sorted(a), sorted(b))
        for key in a:
            assert_same_tree(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, np.ndarray) and a.dtype == object:
        assert b.dtype == object and a.shape == b.shape, where
        for x, y in zip(a, b):
            assert (x is None) == (y is None), where
            if x is not None:
                assert_same_tree(x, y, where)
    elif isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray) and a.dtype == b.dtype, (where, a.dtype, getattr(b, "dtype", type(b)))
        np.testing.assert_array_equal(a, b, err_msg=where)
    else:
        assert a == b and type(a) is type(b), (where, a, b)


def sync_env(b: int, mode: str, cfg: dict, autoreset_mode=AutoresetMode.NEXT_STEP) -> SyncVectorEnv:
    return SyncVectorEnv([lambda: topo_env.orchestrator_env(mode=mode, **cfg)] * b, autoreset_mode=autoreset_mode)


@pytest.mark.parametrize("autoreset_mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP], ids=str)
@pytest.mark.parametrize("mode", ["graph", "next_agent"])
@pytest.mark.parametrize("cfg", CONFIGS.values(), ids=CONFIGS.keys())
def test_equals_gymnasiums_sync_vector_env_across_autoresets(cfg, mode, autoreset_mode):
    b, steps = 7, 14
    ours = orchestrator_vector_env(b, mode=mode, autoreset_mode=autoreset_mode, **cfg)
    ref = sync_env(b, mode, cfg, autoreset_mode)
    assert ours.metadata["autoreset_mode"] == ref.metadata["autoreset_mode"] == autoreset_mode
    (obs, infos), (ref_obs, ref_infos) = ours.reset(seed=11), ref.reset(seed=11)
    assert_same_tree(obs, ref_obs)
    assert_same_tree(infos, numeric(ref_infos))
    ends, mixed_rounds, finals = 0, 0, 0
    for t, action in enumerate(random_actions(mode, b, ours.n_agents, steps, seed=3)):
        mine, theirs = ours.step(action), ref.step(action)
        assert_same_tree(mine[:4], theirs[:4], f"step {t}")
        assert_same_tree(mine[4], numeric(theirs[4]), f"step {t} infos")  # final_obs / final_info too
        ends += int(mine[2].sum())
        mixed_rounds += len(set(mine[0]["round"].tolist())) > 1
        finals += int(mine[4].get("_final_obs", np.zeros(b, bool)).sum())
    assert ends >= 2 * b and mixed_rounds >= steps // 2
    assert finals == (ends if autoreset_mode == AutoresetMode.SAME_STEP else 0)


def test_every_row_replays_the_one_episode_env_with_its_seed_sequence():
    """Row b of reset(seed=s) plays orchestrator_env's reset(seed=s + b), then its plain reset()s (NEXT_STEP:
    the step after an end starts the next episode and ignores the action), whatever round the other rows are at."""
    cfg = CONFIGS["mmlu_pro_T3"]
    b, steps, seed = 5, 16, 40
    venv = orchestrator_vector_env(b, **cfg)
    actions = random_actions("graph", b, 3, steps, seed=8)
    obs, _ = venv.reset(seed=seed)
    played = [venv.step(a) for a in actions]
    assert any(len(set(p[0]["round"].tolist())) > 2 for p in played)  # rows at three different rounds
    env = topo_env.orchestrator_env(**cfg)
    for row in range(b):
        o, info = env.reset(seed=seed + row)
        for key in ("task", "agents", "adjacency", "round"):
            np.testing.assert_array_equal(obs[key][row], o[key])
        ended, episodes = False, 1
        for action, (v_obs, v_rew, v_term, v_trunc, v_info) in zip(actions, played):
            if ended:
                (o, info), r, term, episodes = env.reset(), 0.0, False, episodes + 1
            else:
                o, r, term, _, info = env.step(row_action(action, row))
            assert v_rew[row] == r and v_term[row] == term and not v_trunc[row]
            for key in ("task", "agents", "adjacency", "round"):
                np.testing.assert_array_equal(v_obs[key][row], o[key])
            for key, value in info.items():
                if key not in PER_EPISODE:
                    np.testing.assert_array_equal(v_info[key][row], value, err_msg=key)
            ended = term
        assert episodes >= 3


@pytest.mark.parametrize("mode", ["graph", "next_agent"])
def test_reset_mask_options_and_autoreset_disabled_follow_sync_vector_env(mode):
    cfg = CONFIGS["humaneval_shaped_random_adversary"]
    b = 6
    ours = orchestrator_vector_env(b, mode=mode, autoreset_mode=AutoresetMode.DISABLED, **cfg)
    ref = sync_env(b, mode, cfg, AutoresetMode.DISABLED)
    options = {"split": "eval", "adversaries": [2]}
    mine, theirs = ours.reset(seed=[5, 9, 1, 0, 7, 3], options=options), ref.reset(seed=[5, 9, 1, 0, 7, 3],
                                                                                   options=options)
    assert_same_tree(mine[0], theirs[0])
    assert_same_tree(mine[1], numeric(theirs[1]))
    restarts = 0
    for t, action in enumerate(random_actions(mode, b, 3, 10, seed=5)):
        mine, theirs = ours.step(action), ref.step(action)
        assert_same_tree(mine[:4], theirs[:4], f"step {t}")
        assert_same_tree(mine[4], numeric(theirs[4]))
        done = mine[2]
        if done.all():
            mine, theirs = ours.reset(options={"reset_mask": done.copy()}), ref.reset(options={"reset_mask": done})
        elif done.any():
            seeds = [100 + t + r for r in range(b)]
            mine = ours.reset(seed=seeds, options={"reset_mask": done.copy(), "task": 4})
            theirs = ref.reset(seed=seeds, options={"reset_mask": done.copy(), "task": 4})
        else:
            continue
        assert_same_tree(mine[0], theirs[0])
        assert_same_tree(mine[1], numeric(theirs[1]))
        restarts += 1
    assert restarts >= 3
    with pytest.raises(RuntimeError, match="reset_mask"):
        for action in random_actions(mode, b, 3, 4, seed=6):
            ours.step(action)


def test_spaces_sampled_actions_and_the_recall_key_being_optional():
    venv = orchestrator_vector_env(4, profile="mmlu_pro", rounds=2)
    single = topo_env.orchestrator_env(profile="mmlu_pro", rounds=2)
    assert venv.single_observation_space == single.observation_space
    assert venv.single_action_space == single.action_space
    assert venv.observation_space["agents"].shape == (4, 3, single.obs_builder.agent_feature_dim)
    assert venv.action_space["halt"].shape == (4,)
    obs, infos = venv.reset(seed=0)
    assert venv.observation_space.contains(obs) and infos["_team_tokens"].all()
    venv.action_space.seed(0)
    for _ in range(6):
        obs, rewards, terminated, truncated, infos = venv.step(venv.action_space.sample())
        assert venv.observation_space.contains(obs) and rewards.dtype == np.float64 and not truncated.any()
    twin = orchestrator_vector_env(4, profile="mmlu_pro", rounds=2)
    twin.reset(seed=0)
    venv.reset(seed=0)
    action = random_actions("graph", 4, 3, 1, seed=2)[0]
    action["recall"][:] = 0
    without = {k: v for k, v in action.items() if k != "recall"}
    assert_same_tree(venv.step(action), twin.step(without))
    nxt = orchestrator_vector_env(3, mode="next_agent", profile="mmlu_pro")
    obs, _ = nxt.reset(seed=1)
    assert nxt.action_space.shape == (3,) and nxt.observation_space.contains(nxt.step(nxt.action_space.sample())[0])


def test_gymnasiums_record_episode_statistics_over_it_matches_sync_vector_env():
    cfg = CONFIGS["mmlu_pro_T3"]
    ours = RecordEpisodeStatistics(orchestrator_vector_env(6, **cfg))
    ref = RecordEpisodeStatistics(sync_env(6, "graph", cfg))
    ours.reset(seed=2)
    ref.reset(seed=2)
    finished = 0
    for action in random_actions("graph", 6, 3, 12, seed=4):
        mine, theirs = ours.step(action)[4], ref.step(action)[4]
        assert ("episode" in mine) == ("episode" in theirs)
        if "episode" in mine:
            np.testing.assert_array_equal(mine["_episode"], theirs["_episode"])
            np.testing.assert_array_equal(mine["episode"]["r"], theirs["episode"]["r"])
            np.testing.assert_array_equal(mine["episode"]["l"], theirs["episode"]["l"])
            finished += int(mine["_episode"].sum())
    assert finished == ours.episode_count >= 10 and list(ours.return_queue) == list(ref.return_queue)


def test_same_seed_same_run_and_another_seed_another():
    def run(seed):
        venv = orchestrator_vector_env(5, mode="next_agent", profile="aime25", rounds=3)
        out = [venv.reset(seed=seed)[0]]
        out += [venv.step(a)[:3] for a in random_actions("next_agent", 5, 3, 8, seed=1)]
        return tuple(out)

    assert_same_tree(run(7), run(7))
    with pytest.raises(AssertionError):
        assert_same_tree(run(7)[0], run(8)[0])


@pytest.mark.parametrize("change, message", [
    (lambda a: a.pop("halt"), r"keys \['active', 'adjacency', 'halt', 'verify'\]"),
    (lambda a: a.update(adjacency=np.zeros((4, 2, 2), np.int8)), r"action\['adjacency'\] has shape \(4, 2, 2\)"),
    (lambda a: a["active"].__setitem__((2, 1), 3), r"action\['active'\] holds 3"),
    (lambda a: a.update(verify=np.zeros((4, 3))), r"action\['verify'\] has dtype float64"),
    (lambda a: a["halt"].__setitem__(3, 2), r"action\['halt'\] holds 2"),
    (lambda a: a.update(halt=np.zeros(4, bool)), r"action\['halt'\] is a bool array"),
    (lambda a: a["recall"].__setitem__((0, 0, 1), -1), r"action\['recall'\] holds -1"),
])
def test_bad_graph_actions_name_the_value_and_change_nothing(change, message):
    venv, twin = (orchestrator_vector_env(4, profile="mmlu_pro", rounds=2) for _ in range(2))
    venv.reset(seed=0)
    twin.reset(seed=0)
    good = random_actions("graph", 4, 3, 2, seed=0)
    venv.step(good[0])
    twin.step(good[0])
    bad = {k: v.copy() for k, v in good[1].items()}
    change(bad)
    with pytest.raises(ValueError, match=message):
        venv.step(bad)
    assert_same_tree(venv.step(good[1]), twin.step(good[1]))


@pytest.mark.parametrize("action, message", [
    (np.array([0, 4, 1]), r"action 4 \(row 1\) is not an agent index 0..2 or 3 \(stop\)"),
    (np.array([0, -1, 1]), r"action -1 \(row 1\)"),
    (np.array([0.0, 1.0, 1.0]), r"float64 array of shape \(3,\)"),
    (np.array([0, 1]), r"shape \(2,\)"),
])
def test_bad_next_agent_actions_change_nothing(action, message):
    venv, twin = (orchestrator_vector_env(3, mode="next_agent", profile="mmlu_pro", rounds=2) for _ in range(2))
    venv.reset(seed=0)
    twin.reset(seed=0)
    with pytest.raises(ValueError, match=message):
        venv.step(action)
    assert_same_tree(venv.step(np.array([2, 0, 3])), twin.step(np.array([2, 0, 3])))


def test_bad_use_is_named():
    with pytest.raises(ValueError, match="backend kind 'llm' is not one: for an LLM team use "
                                         r"gymnasium.vector.SyncVectorEnv\(\[lambda: topo_env.orchestrator_env") as err:
        OrchestratorVectorEnv(4, EnvConfig.from_dict({"domain": "reasoning", "backend": {
            "kind": "llm", "model": "m", "base_url": "http://127.0.0.1:1/v1", "dataset": "mmlu_pro_sample"}}))
    assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match="num_envs=0"):
        orchestrator_vector_env(0)
    with pytest.raises(topo_env.ConfigError, match="mode='tree'"):
        orchestrator_vector_env(2, mode="tree")
    venv = orchestrator_vector_env(2)
    with pytest.raises(RuntimeError, match="reset"):
        venv.step(venv.action_space.sample())
    with pytest.raises(ValueError, match="one per row"):
        venv.reset(seed=[1, 2, 3])
    with pytest.raises(ValueError, match="reset_mask"):
        venv.reset(options={"reset_mask": np.zeros(2, bool)})
    venv.reset(seed=0)
    with pytest.raises(ValueError, match="options\\['task'\\]"):
        venv.reset(options={"task": "first"})
    twin = orchestrator_vector_env(2)
    twin.reset(seed=0)
    assert_same_tree(venv.reset(), twin.reset())  # the failed reset left the rows' generators as they were


def test_batch_round_spec_recall_validation():
    on = np.ones((2, 3), bool)
    z = np.zeros((2, 3, 3), np.int8)
    recall = np.zeros((2, 3, 3), bool)
    assert BatchRoundSpec(z, on, ~on, recall).recall is None  # no recall set: none
    recall[1, 2, 2] = True
    with pytest.raises(ValueError, match="episode 1: recall self-loop at agent 2"):
        BatchRoundSpec(z, on, ~on, recall)
    recall = np.zeros((2, 3, 3), bool)
    recall[0, 0, 1] = True
    off = on.copy()
    off[0, 1] = False
    with pytest.raises(ValueError, match="episode 0: recalls to inactive agent 1"):
        BatchRoundSpec(z, off, ~on, recall)
    with pytest.raises(ValueError, match=r"recall must be a bool array of shape \(2, 3, 3\)"):
        BatchRoundSpec(z, on, ~on, recall.astype(np.int8))
