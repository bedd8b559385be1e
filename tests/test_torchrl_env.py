"""topo_env.interop.torchrl_env.TopologyTorchRLEnv: the simulated team as one vectorised TorchRL env.

Its specs pass TorchRL's check and have the keys, dtypes and per-row shapes of TorchRL's
PettingZooWrapper over the PettingZoo env; every row plays the PettingZoo env's episode of its seed
(observations, state, masks, rewards, done flags and infos, step by step, across resets); seeds
replay; partial resets and LLM teams are refused; the BenchMARL task builds it for simulated teams.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
from test_imports import loaded_extras
from torchrl.envs import PettingZooWrapper
from torchrl.envs.utils import check_env_specs, step_mdp

from topo_env import ACTION_NAMES, EnvConfig
from topo_env.frontends.parallel_env import INFO_KEYS, TopologyParallelEnv
from topo_env.interop.torchrl_env import TopologyTorchRLEnv

torch.set_num_threads(1)

LLM_TEAM = {"backend": {"kind": "llm", "model": "qwen2.5-7b-instruct", "base_url": "http://127.0.0.1:8080/v1",
                        "dataset": "humaneval"}, "domain": "code"}  # never called: nothing here plays it
SETTINGS = [
    {"disabled_actions": ["broadcast_all"]},
    {"reward_mode": "shaped", "rounds": 3, "n_agents": 4, "adversary_position": "random", "n_adversaries": 1},
]


def wrapper_env(config: EnvConfig) -> PettingZooWrapper:
    return PettingZooWrapper(env=TopologyParallelEnv(config), return_state=True, categorical_actions=True,
                             use_mask=True)


def leaves(spec) -> dict:
    return {key: spec[key] for key in spec.keys(include_nested=True, leaves_only=True)}


def test_specs_pass_torchrl_check_and_are_the_wrappers_with_a_batch_dimension():
    config = EnvConfig(disabled_actions=("debate_check",))
    env = TopologyTorchRLEnv(config, num_envs=3, seed=0)
    check_env_specs(env)
    wrapper = wrapper_env(config)
    assert env.batch_size == (3,) and env.group_map == wrapper.group_map
    assert env.reset_keys == wrapper.reset_keys and env.done_keys == wrapper.done_keys
    for name in ("observation_spec", "full_action_spec", "full_reward_spec", "full_done_spec"):
        ours, theirs = leaves(getattr(env, name)), leaves(getattr(wrapper, name))
        assert set(ours) == set(theirs), name
        for key, spec in theirs.items():
            assert (type(ours[key]), ours[key].dtype) == (type(spec), spec.dtype), key
            assert ours[key].shape == (3, *spec.shape), key
    mask = env.full_action_spec["agent", "action"].mask
    assert mask.shape == (3, 3, 6) and not mask[..., ACTION_NAMES.index("debate_check")].any()
    assert mask.sum() == 3 * 3 * 5


def pettingzoo_episode(config: EnvConfig, seed: int, actions: np.ndarray) -> list[tuple]:
    """(obs, infos, state) at reset, then (obs, rewards, terminations, truncations, infos, state)
    after each of ``actions`` (T, N), played on the PettingZoo env reset with ``seed``."""
    env = TopologyParallelEnv(config)
    obs, infos = env.reset(seed=seed)
    steps = [(obs, infos, env.state())]
    for joint in actions:
        out = env.step({a: int(joint[i]) for i, a in enumerate(env.possible_agents)})
        steps.append((*out, env.state()))
    return steps


def assert_row_is_the_pettingzoo_step(row, obs, infos, state, names):
    np.testing.assert_array_equal(row["agent", "observation", "observation"].numpy(),
                                  np.stack([obs[a]["observation"] for a in names]))
    np.testing.assert_array_equal(row["agent", "action_mask"].numpy(),
                                  np.stack([obs[a]["action_mask"] for a in names]).astype(bool))
    np.testing.assert_array_equal(row["state"].numpy(), state)
    for key in INFO_KEYS:
        np.testing.assert_array_equal(row["agent", "info", key].numpy(),
                                      np.stack([infos[a][key] for a in names]).astype(np.float32), err_msg=key)
    assert row["agent", "mask"].all()


@pytest.mark.parametrize("setting", SETTINGS, ids=["sparse", "shaped,T=3,N=4,adversary"])
def test_every_row_plays_the_pettingzoo_episode_of_its_seed_across_resets(setting):
    config = EnvConfig.from_dict(setting)
    rows, rounds, names = 4, config.rounds, [f"agent_{i}" for i in range(config.n_agents)]
    env = TopologyTorchRLEnv(config, num_envs=rows, seed=100)
    rng = np.random.default_rng(0)
    valid = [a for a in range(6) if a not in config.disabled_actions]
    accuracies = []
    for k in range(2):  # two resets: seeds 100 + k * 4 + b
        actions = rng.choice(valid, (rows, rounds, config.n_agents))
        td = env.reset()
        assert env.episode_seeds() == [100 + k * rows + b for b in range(rows)]
        reference = [pettingzoo_episode(config, seed, actions[b]) for b, seed in enumerate(env.episode_seeds())]
        for b in range(rows):
            assert_row_is_the_pettingzoo_step(td[b], reference[b][0][0], reference[b][0][1], reference[b][0][2], names)
            assert not td[b]["done"].any() and not td[b]["agent", "done"].any()
        for t in range(rounds):
            td.set(("agent", "action"), torch.as_tensor(actions[:, t]))
            td = env.step(td)
            nxt = td["next"]
            for b in range(rows):
                obs, rewards, terms, truncs, infos, state = reference[b][t + 1]
                assert_row_is_the_pettingzoo_step(nxt[b], obs, infos, state, names)
                np.testing.assert_array_equal(nxt[b]["agent", "reward"].squeeze(-1).numpy(),
                                              np.array([rewards[a] for a in names], dtype=np.float32))
                assert nxt[b]["agent", "terminated"].squeeze(-1).tolist() == [terms[a] for a in names]
                assert nxt[b]["agent", "truncated"].squeeze(-1).tolist() == [truncs[a] for a in names]
                assert nxt[b]["agent", "done"].squeeze(-1).tolist() == [terms[a] for a in names]
                assert nxt[b]["terminated"].item() == nxt[b]["done"].item() == (t == rounds - 1)
                assert not nxt[b]["truncated"].item()
            td = step_mdp(td)
        accuracies += nxt["agent", "info", "accuracy"][:, 0].tolist()
    assert env.resets == 2 and 0 < sum(accuracies) < len(accuracies)  # the decisions went both ways


def test_the_same_seed_replays_the_same_rollout_and_another_seed_does_not():
    def rollout(env: TopologyTorchRLEnv):
        torch.manual_seed(0)  # the random actions
        return env.rollout(6, break_when_any_done=False)

    first = rollout(TopologyTorchRLEnv(num_envs=5, seed=7))
    env = TopologyTorchRLEnv(num_envs=5, seed=7)
    assert (rollout(env) == first).all()
    env.set_seed(7)  # seeding again restarts the seeds
    assert env.resets == 0 and (rollout(env) == first).all()
    assert env.episode_seeds(0) == [7, 8, 9, 10, 11] and env.episode_seeds() == [17, 18, 19, 20, 21]
    other = rollout(TopologyTorchRLEnv(num_envs=5, seed=8))
    assert not torch.equal(other["agent", "observation", "observation"], first["agent", "observation", "observation"])
    assert first.shape == (5, 6) and first["next", "done"].squeeze(-1).tolist() == [[False, True] * 3] * 5
    unseeded = [TopologyTorchRLEnv(num_envs=2).base_seed for _ in range(3)]
    assert len(set(unseeded)) == 3  # drawn from numpy's default_rng()


def test_tensors_and_specs_live_on_the_device_asked_for():
    env = TopologyTorchRLEnv(num_envs=2, seed=0, device="cpu")
    assert env.device == torch.device("cpu")
    assert all(spec.device == torch.device("cpu") for spec in leaves(env.observation_spec).values())
    rollout = env.rollout(2, break_when_any_done=False)
    assert {tensor.device for tensor in rollout.values(include_nested=True, leaves_only=True)} == {torch.device("cpu")}


def test_a_team_the_batch_simulator_does_not_play_is_refused_in_one_line():
    with pytest.raises(ValueError, match="backend kind 'llm'.*PettingZooWrapper") as error:
        TopologyTorchRLEnv(EnvConfig.from_dict(LLM_TEAM), num_envs=2)
    assert "\n" not in str(error.value)


def test_a_partial_reset_mid_episode_is_refused_and_a_full_one_starts_the_next_episodes():
    env = TopologyTorchRLEnv(num_envs=3, seed=0)
    td = env.reset()
    td.set(("agent", "action"), torch.zeros(3, 3, dtype=torch.int64))
    td = step_mdp(env.step(td))
    partial = td.select().set("_reset", torch.tensor([[True], [False], [False]]))
    with pytest.raises(RuntimeError, match=r"partial reset of rows \[0\] of 3"):
        env.reset(partial)
    assert env.venv.round == 1  # nothing changed
    env.reset(td.select().set("_reset", torch.zeros(3, 1, dtype=torch.bool)))  # no row: nothing changes
    assert env.venv.round == 1 and env.resets == 1
    everything = env.reset(td.select().set(("agent", "_reset"), torch.ones(3, 3, 1, dtype=torch.bool)))
    assert env.venv.round == 0 and env.episode_seeds() == [3, 4, 5]
    assert not torch.equal(everything["agent", "observation", "observation"], td["agent", "observation", "observation"])


def test_benchmarl_task_builds_the_vectorised_env_for_a_simulated_team_and_the_wrapper_for_an_llm_team():
    pytest.importorskip("benchmarl")
    from topo_env.interop.benchmarl_task import SeededEnvMaker, TopoMARLTask

    task = TopoMARLTask.TOPOLOGY.get_task(config={"rounds": 2, "disabled_actions": ["broadcast_all"]})
    env = task.get_env_fun(num_envs=5, continuous_actions=False, seed=3, device="cpu")()
    assert isinstance(env, TopologyTorchRLEnv) and env.batch_size == (5,) and env.base_seed == 3
    wrapper = wrapper_env(task.env_config)
    assert task.group_map(env) == task.group_map(wrapper) == {"agent": ["agent_0", "agent_1", "agent_2"]}
    for spec_of in (task.observation_spec, task.action_mask_spec, task.state_spec, task.info_spec, task.action_spec):
        ours, theirs = spec_of(env), spec_of(wrapper)  # one env's specs: the vectorised env's without B
        assert ours.shape == theirs.shape and set(leaves(ours)) == set(leaves(theirs)), spec_of.__name__
        assert all((v.shape, v.dtype) == (theirs[k].shape, theirs[k].dtype) for k, v in leaves(ours).items())
    llm_task = TopoMARLTask.TOPOLOGY.get_task(config=LLM_TEAM)
    maker = llm_task.get_env_fun(num_envs=5, continuous_actions=False, seed=3, device="cpu")
    assert isinstance(maker, SeededEnvMaker) and maker.config == llm_task.env_config and maker.seed == 3


def test_the_interop_package_exports_the_env_without_loading_torch_until_asked():
    assert loaded_extras("import topo_env.interop") == []  # epymarl users import it without torch
    assert loaded_extras("from topo_env.interop import TopologyTorchRLEnv") == ["tensordict", "torch", "torchrl"]
