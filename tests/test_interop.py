"""The env inside other MARL libraries: the raw PettingZoo env in TorchRL, SuperSuit and Tianshou
as their docs show; epymarl's gymma with the shipped epymarl config; BenchMARL; and the recipes
of docs/interop.md that show each."""
from __future__ import annotations

import copy
import dataclasses
import numbers
import re
import tempfile
import warnings
from pathlib import Path

import gymnasium
import numpy as np
import pytest
import supersuit as ss
import torch
from gymnasium.spaces import flatdim, flatten
from gymnasium.utils.env_checker import check_env
from gymnasium.wrappers import TimeLimit
from pettingzoo.utils.conversions import parallel_to_aec
from tensordict.nn import TensorDictModule, TensorDictSequential
from tianshou.env import PettingZooEnv
from torchrl.envs import PettingZooWrapper
from torchrl.envs.utils import check_env_specs
from torchrl.modules import QValueModule

from topo_env import ACTION_NAMES, ConfigError, EnvConfig, parallel_env
from agents_llm.config import LLMBackendConfig
from topo_env.sim.config import SimBackendConfig
from topo_env.engine.config_checks import load_yaml
from topo_env.interop import ENV_ID, EPYMARL_CONFIG, TopologyGymmaEnv, gymma_env_config

# BenchMARL is imported in its tests: it installs with `pip install --no-deps benchmarl` (README)

torch.set_num_threads(1)

RECIPES = Path(__file__).resolve().parents[1] / "docs" / "interop.md"
DISABLED = ["broadcast_all", "debate_check"]
DISABLED_IDX = sorted(ACTION_NAMES.index(a) for a in DISABLED)
GYMMA_KEY = f"topo_env.interop:{ENV_ID}"


def masked_choice(rng: np.random.Generator, mask) -> int:
    return int(rng.choice(np.flatnonzero(np.asarray(mask))))


# ---------------------------------------------------------------------------------------
# README
# ---------------------------------------------------------------------------------------


def recipe_blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", RECIPES.read_text(), flags=re.S)


def test_recipes_run(tmp_path, monkeypatch):
    blocks = recipe_blocks("python")
    for library in ("pettingzoo", "torchrl", "supersuit", "tianshou", "gymnasium", "benchmarl"):
        assert any(f"from {library}" in b or f"import {library}" in b for b in blocks), library
    monkeypatch.chdir(tmp_path)  # anything a snippet writes stays in tmp_path
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    for block in blocks:
        namespace: dict = {"__name__": "readme_snippet"}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            exec(compile(block, str(RECIPES), "exec"), namespace)  # noqa: S102 - our own docs


def test_epymarl_recipe_names_the_config_it_copies():
    """The shell recipe copies EPYMARL_CONFIG into epymarl's src/config/envs/ under the name its
    ``--env-config=`` gives, and overrides only declared keys."""
    recipe = next(b for b in recipe_blocks("bash") if "src/main.py" in b)
    name = re.search(r"--env-config=(\S+)", recipe).group(1)
    assert "EPYMARL_CONFIG" in recipe and f"src/config/envs/{name}.yaml" in recipe
    declared = load_yaml(EPYMARL_CONFIG)["env_args"]
    for key in re.findall(r"env_args\.([\w.]+)=", recipe):
        node = declared
        for part in key.split("."):
            assert isinstance(node, dict) and part in node, f"the recipe overrides env_args.{key}, not declared"
            node = node[part]


# ---------------------------------------------------------------------------------------
# TorchRL
# ---------------------------------------------------------------------------------------


def greedy_masked_policy(n_actions: int, favourite: int, mask_key):
    """A QValue actor whose Q-values rank ``favourite`` first for every observation;
    ``mask_key`` None ignores the action mask."""
    class FixedQ(torch.nn.Module):
        def forward(self, obs):
            q = torch.arange(n_actions, dtype=torch.float32).expand(*obs.shape[:-1], n_actions).clone()
            q[..., favourite] = n_actions + 1.0
            return q

    q_net = TensorDictModule(FixedQ(), in_keys=[("agent", "observation", "observation")],
                             out_keys=[("agent", "action_value")])
    select = QValueModule(action_space="categorical", action_value_key=("agent", "action_value"),
                          out_keys=[("agent", "action"), ("agent", "action_value"), ("agent", "chosen_action_value")],
                          action_mask_key=mask_key)
    return TensorDictSequential(q_net, select)


def torchrl_wrapper(seed: int | None = None, **env_keys) -> PettingZooWrapper:
    """TorchRL's wrapper over the raw env, as TorchRL's docs show it."""
    return PettingZooWrapper(env=parallel_env(**env_keys), use_mask=True, return_state=True,
                             categorical_actions=True, seed=seed)


def test_torchrl_wrapper_on_the_raw_env_matches_the_env():
    """Random masked actions through TorchRL's wrapper; the same actions on a raw env reset with
    the same seed give the same observations, masks, state, rewards and done flags, step by
    step, across the wrapper's automatic resets."""
    env = torchrl_wrapper(disabled_actions=DISABLED, rounds=2)
    check_env_specs(env)
    assert env.group_map == {"agent": ["agent_0", "agent_1", "agent_2"]}
    expected_mask = torch.ones(3, 6, dtype=torch.bool)
    expected_mask[:, DISABLED_IDX] = False
    td = env.reset(seed=5)
    rollout = env.rollout(6, auto_reset=False, tensordict=td, break_when_any_done=False)
    assert torch.equal(rollout["agent", "action_mask"], expected_mask.expand(6, 3, 6))
    assert not np.isin(rollout["agent", "action"].numpy(), DISABLED_IDX).any()  # random actions respect it
    assert rollout["agent", "mask"].all()  # no agent ever leaves

    raw = parallel_env(disabled_actions=DISABLED, rounds=2)
    obs, _ = raw.reset(seed=5)
    for step in rollout.unbind(0):
        agents = raw.possible_agents
        np.testing.assert_array_equal(step["agent", "observation", "observation"].numpy(),
                                      np.stack([obs[a]["observation"] for a in agents]))
        np.testing.assert_array_equal(step["agent", "action_mask"].numpy(),
                                      np.stack([obs[a]["action_mask"] for a in agents]))
        np.testing.assert_allclose(step["state"].numpy(), raw.state())
        actions = dict(zip(agents, step["agent", "action"].tolist()))
        obs, rewards, terminations, truncations, infos = raw.step(actions)
        np.testing.assert_allclose(step["next", "agent", "reward"].squeeze(-1).numpy(), [rewards[a] for a in agents])
        assert step["next", "agent", "terminated"].squeeze(-1).tolist() == [terminations[a] for a in agents]
        assert step["next", "agent", "truncated"].squeeze(-1).tolist() == [truncations[a] for a in agents]
        assert step["next", "agent", "info", "team_tokens"].tolist() == [infos[a]["team_tokens"] for a in agents]
        if bool(step["next", "done"]):
            obs, _ = raw.reset()  # the wrapper resets without a seed, as here
    done = rollout["next", "done"].squeeze(-1)
    assert done.tolist() == [False, True] * 3  # 2 rounds per episode
    rewards = rollout["next", "agent", "reward"].squeeze(-1)
    assert torch.equal(rewards[~done], torch.zeros_like(rewards[~done]))
    assert (rewards[done] == rewards[done][:, :1]).all() and (rewards[done] != 0).all()  # one team reward


def test_torchrl_masked_q_policy_never_picks_a_disabled_action():
    env = torchrl_wrapper(seed=0, disabled_actions=DISABLED, rounds=2)
    favourite = DISABLED_IDX[-1]
    td = env.reset()
    unmasked = greedy_masked_policy(6, favourite, mask_key=None)(td.clone())
    assert (unmasked["agent", "action"] == favourite).all()  # without the mask it would
    policy = greedy_masked_policy(6, favourite, mask_key=("agent", "action_mask"))
    rollout = env.rollout(6, policy=policy, break_when_any_done=False)  # the env raises on a masked action
    actions = rollout["agent", "action"].numpy()
    assert (actions == 4).all()  # the best allowed action under the fixed Q-values
    assert rollout["next", "state"].shape == (6, env.observation_spec["state"].shape[0])
    done = rollout["next", "done"].squeeze(-1)
    assert (rollout["next", "agent", "info", "team_tokens"][done] > 0).all()


def test_torchrl_rollouts_are_reproducible():
    policy = greedy_masked_policy(6, 2, mask_key=("agent", "action_mask"))
    runs = []
    for _ in range(2):
        env = torchrl_wrapper(seed=3, rounds=2)
        runs.append(env.rollout(4, policy=policy, break_when_any_done=False))
    assert (runs[0] == runs[1]).all()


# ---------------------------------------------------------------------------------------
# SuperSuit
# ---------------------------------------------------------------------------------------


def test_supersuit_concat_vec_envs_steps_pickled_copies():
    n, copies = 3, 2
    venv = ss.concat_vec_envs_v1(ss.pettingzoo_env_to_vec_env_v1(parallel_env(disabled_actions=DISABLED)),
                                 copies, num_cpus=0, base_class="gymnasium")
    assert venv.num_envs == n * copies
    obs, infos = venv.reset(seed=10)
    assert obs["observation"].shape[0] == obs["action_mask"].shape[0] == n * copies
    # copy i is the env reset with seed 10 + i
    for i in range(copies):
        ref_obs, _ = parallel_env(disabled_actions=DISABLED).reset(seed=10 + i)
        ref = np.stack([ref_obs[a]["observation"] for a in sorted(ref_obs)])
        np.testing.assert_array_equal(obs["observation"][i * n:(i + 1) * n], ref)
    rng = np.random.default_rng(0)
    for step in range(4):  # two episodes of two rounds, auto-reset between them
        masks = obs["action_mask"]
        assert not masks[:, DISABLED_IDX].any()
        actions = np.array([masked_choice(rng, m) for m in masks])
        obs, rewards, terminations, truncations, infos = venv.step(actions)
        assert not truncations.any()
        last = step % 2 == 1
        assert terminations.all() == last and terminations.any() == last
        if last:
            for i in range(copies):
                assert np.all(rewards[i * n:(i + 1) * n] == rewards[i * n])
            assert all("terminal_observation" in info for info in infos)
        else:
            assert not rewards.any()


# ---------------------------------------------------------------------------------------
# Tianshou
# ---------------------------------------------------------------------------------------


def test_tianshou_pettingzoo_env_full_episodes_with_masks():
    n, rounds = 3, 2
    env = PettingZooEnv(parallel_to_aec(parallel_env(disabled_actions=DISABLED, rounds=rounds)))
    rng = np.random.default_rng(1)
    for seed in range(2):
        obs, _ = env.reset(seed=seed)
        turns = []
        while True:
            mask = np.asarray(obs["mask"])
            assert mask.tolist() == [i not in DISABLED_IDX for i in range(6)]
            turns.append(obs["agent_id"])
            obs, rewards, terminated, truncated, info = env.step(masked_choice(rng, mask))
            assert not truncated
            if terminated:
                break
            assert rewards == [0] * n
        assert turns == [f"agent_{i}" for i in range(n)] * rounds
        assert len(set(rewards)) == 1 and rewards[0] != 0  # the team reward, paid to all
        assert isinstance(info["team_tokens"], numbers.Integral) and info["team_tokens"] > 0


# ---------------------------------------------------------------------------------------
# epymarl's gymma
# ---------------------------------------------------------------------------------------


def gymma_run(key: str, time_limit: int, seed: int, episodes: int, scalarisation: str = "sum", **env_args):
    """Drive the env through the calls epymarl's ``GymmaWrapper`` and ``EpisodeRunner`` make
    (epymarl src/envs/gymma.py, src/runners/episode_runner.py): gymnasium.make(key, **env_args),
    TimeLimit, per-agent flattening, seeding, get_state / get_avail_actions / get_obs before each
    step, ``step([int, ...])``, reward scalarisation, ``terminated != info["episode_limit"]``,
    and the summed info statistics. Returns per-episode records and the summed stats."""
    env = TimeLimit(gymnasium.make(key, **env_args), max_episode_steps=time_limit)
    n_agents = env.unwrapped.n_agents
    obs_spaces, act_spaces = env.observation_space, env.action_space
    assert isinstance(obs_spaces, gymnasium.spaces.Tuple) and isinstance(act_spaces, gymnasium.spaces.Tuple)
    assert len(obs_spaces) == len(act_spaces) == n_agents
    obs_size = max(flatdim(s) for s in obs_spaces)
    n_actions = max(s.n for s in act_spaces)
    state_size = n_agents * obs_size  # the env has no "state_size": gymma concatenates observations
    assert not hasattr(env.unwrapped, "state_size")
    env.reset(seed=seed)  # gymma: unwrapped.seed(seed) fails -> reset(seed=seed)
    aggregate = sum if scalarisation == "sum" else (lambda r: sum(r) / len(r))
    rng = np.random.default_rng(seed)  # epsilon-greedy exploration: uniform among avail actions
    stats: dict[str, float] = {}
    records = []
    for _ in range(episodes):
        obs, _ = env.reset()
        obs = [flatten(s, o) for s, o in zip(obs_spaces, obs)]
        terminated, t, episode_return, stored_terminal, played = False, 0, 0.0, [], []
        while not terminated:
            state = np.concatenate(obs, axis=0).astype(np.float32)
            assert state.shape == (state_size,) and all(o.shape == (obs_size,) for o in obs)
            avail = [[1] * flatdim(act_spaces[i]) + [0] * (n_actions - flatdim(act_spaces[i])) for i in range(n_agents)]
            actions = [masked_choice(rng, m) for m in avail]
            played.append(actions)
            obs, reward, done, truncated, info = env.step(actions)
            if truncated:  # gymma: a TimeLimit truncation is reported as an episode limit
                info = dict(info, episode_limit=True)
            obs = [flatten(s, o) for s, o in zip(obs_spaces, obs)]
            reward = float(aggregate(reward))
            terminated = bool(done) or truncated
            stored_terminal.append(terminated != info.get("episode_limit", False))
            episode_return += reward
            t += 1
        stats = {k: stats.get(k, 0) + info.get(k, 0) for k in set(stats) | set(info)}
        records.append({"length": t, "return": episode_return, "terminal": stored_terminal, "info": info,
                        "actions": played})
    return records, stats


def test_gymma_shape_as_epymarl_drives_it():
    rounds, n = 2, 3
    records, stats = gymma_run(GYMMA_KEY, time_limit=rounds + 1, seed=0, episodes=3, rounds=rounds)
    for rec in records:
        assert rec["length"] == rounds
        assert rec["terminal"] == [False] * (rounds - 1) + [True]  # a true terminal: no bootstrap
        assert rec["info"]["episode_limit"] is False
        assert all(isinstance(v, numbers.Number) for v in rec["info"].values())
    # the same actions on the PettingZoo env give the same team reward, summed over N agents
    env = parallel_env(rounds=rounds)
    env.reset(seed=0)
    for rec in records:
        env.reset()
        team_return = 0.0
        for actions in rec["actions"]:
            _, rewards, *_ = env.step(dict(zip(env.possible_agents, actions)))
            team_return += rewards["agent_0"]
        assert rec["return"] == pytest.approx(n * team_return)
    assert stats["accuracy"] == sum(r["info"]["accuracy"] for r in records)
    mean_records, _ = gymma_run(GYMMA_KEY, time_limit=rounds + 1, seed=0, episodes=3, scalarisation="mean",
                                rounds=rounds)
    assert [r["return"] for r in mean_records] == pytest.approx([r["return"] / n for r in records])
    # with time_limit == rounds, TimeLimit truncates the last round too and gymma would store it
    # as a time-out (bootstrapped): hence time_limit = rounds + 1 in the README
    cut, _ = gymma_run(GYMMA_KEY, time_limit=rounds, seed=0, episodes=1, rounds=rounds)
    assert cut[0]["terminal"][-1] is False


def test_gymma_registration_and_gymnasium_checks():
    assert ENV_ID in gymnasium.registry
    env = gymnasium.make(GYMMA_KEY, rounds=3, n_agents=4)
    assert isinstance(env.unwrapped, TopologyGymmaEnv) and env.unwrapped.n_agents == 4
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # unbounded Box, list rewards: gymnasium only warns
        check_env(env.unwrapped, skip_render_check=True)
    obs, info = env.reset(seed=5)
    assert len(obs) == 4 and all(o.dtype == np.float32 for o in obs)
    assert set(info) == {"team_tokens", "edges", "density", "accuracy", "tokens_estimated", "calls",
                         "round_tokens", "round", "episode_limit"}
    np.testing.assert_array_equal(env.unwrapped.state(), env.unwrapped.env.state())


def test_gymma_avail_actions_and_bad_input():
    env = TopologyGymmaEnv(disabled_actions=DISABLED)
    with pytest.raises(RuntimeError, match="before reset"):
        env.get_avail_actions()
    env.reset(seed=0)
    allowed = [0 if i in DISABLED_IDX else 1 for i in range(6)]
    assert env.get_avail_actions() == [allowed] * 3
    with pytest.raises(ValueError, match="2 entries, expected 3"):
        env.step([0, 0])
    with pytest.raises(ValueError, match="sequence of 3 integers"):
        env.step(4)
    with pytest.raises(ValueError, match="masked out"):
        env.step([0, DISABLED_IDX[0], 0])
    with pytest.raises(ConfigError, match="not both"):
        TopologyGymmaEnv(EnvConfig(), rounds=3)
    with pytest.raises(ConfigError, match="bogus"):
        gymnasium.make(GYMMA_KEY, bogus=1)
    with pytest.raises(ConfigError, match="EnvConfig"):
        TopologyGymmaEnv({"rounds": 3})


def test_gymma_is_reproducible():
    def run():
        env = gymnasium.make(GYMMA_KEY)
        out = [env.reset(seed=7)[0]]
        for acts in ([1, 2, 3], [3, 4, 0]):
            obs, rewards, *_ = env.step(acts)
            out += [obs, rewards]
        return out

    a, b = run(), run()
    for x, y in zip(a, b):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


# epymarl reads env_args.key, time_limit and pretrained_wrapper itself (seed, common_reward and
# reward_scalarisation it adds) and passes every other env_args key to gymnasium.make
GYMMA_OWN_ARGS = ("key", "time_limit", "pretrained_wrapper")


def with_overrides(config: dict, overrides: dict[str, object]) -> dict:
    """``config`` after epymarl's ``with a.b=value`` overrides, refusing (as sacred does, with
    ``ConfigAddedError``) a dotted key the config does not declare."""
    config = copy.deepcopy(config)
    for dotted, value in overrides.items():
        *path, last = dotted.split(".")
        node = config
        for part in path:
            node = node.get(part) if isinstance(node, dict) else None
        if not isinstance(node, dict) or last not in node:
            raise KeyError(f"ConfigAddedError: {dotted}")
        node[last] = value
    return config


def epymarl_env(config: dict, seed: int, episodes: int):
    env_args = config["env_args"]
    kwargs = {k: v for k, v in env_args.items() if k not in GYMMA_OWN_ARGS}
    return gymma_run(env_args["key"], env_args["time_limit"], seed, episodes, config["reward_scalarisation"],
                     **kwargs)


def test_epymarl_config_ships_and_declares_every_env_key():
    assert EPYMARL_CONFIG.is_file() and EPYMARL_CONFIG.suffix == ".yaml"  # package data: pyproject's "*.yaml"
    config = load_yaml(EPYMARL_CONFIG)
    assert config["env"] == "gymma" and config["env_args"]["key"] == GYMMA_KEY
    env_args = config["env_args"]
    env_keys = {f.name for f in dataclasses.fields(EnvConfig)}
    assert set(env_args) - set(GYMMA_OWN_ARGS) == env_keys  # every key a user may override, no other
    backend_keys = {f.name for cls in (SimBackendConfig, LLMBackendConfig) for f in dataclasses.fields(cls)}
    assert set(env_args["backend"]) == backend_keys - {"api_key"}  # the key stays in OPENAI_API_KEY
    # as shipped, the env of the defaults, with time_limit = rounds + 1
    shipped = gymma_env_config(None, {k: v for k, v in env_args.items() if k not in GYMMA_OWN_ARGS})
    assert shipped == EnvConfig()
    assert env_args["time_limit"] == shipped.rounds + 1
    assert config["reward_scalarisation"] == "mean" and config["common_reward"] is True


def test_epymarl_config_builds_the_env_with_overrides():
    config = load_yaml(EPYMARL_CONFIG)
    with pytest.raises(KeyError, match="env_args.bogus"):
        with_overrides(config, {"env_args.bogus": 1})
    overridden = with_overrides(config, {"env_args.rounds": 3, "env_args.time_limit": 4, "env_args.n_agents": 4,
                                         "env_args.roles": ["specialist", "specialist", "analyzer", "analyzer"],
                                         "env_args.backend.profile": "humaneval"})
    records, stats = epymarl_env(overridden, seed=0, episodes=2)
    for rec in records:
        assert rec["length"] == 3 and rec["terminal"] == [False, False, True]
        assert all(len(actions) == 4 for actions in rec["actions"])
    # mean scalarisation: the episode return is the team reward of the same actions on the raw env
    raw = parallel_env(rounds=3, n_agents=4, roles=("specialist", "specialist", "analyzer", "analyzer"),
                       profile="humaneval")
    raw.reset(seed=0)
    for rec in records:
        raw.reset()
        team_return = sum(raw.step(dict(zip(raw.possible_agents, a)))[1]["agent_0"] for a in rec["actions"])
        assert rec["return"] == pytest.approx(team_return)
    assert stats["accuracy"] == sum(r["info"]["accuracy"] for r in records)


def test_epymarl_config_switches_the_backend_by_overrides():
    config = with_overrides(load_yaml(EPYMARL_CONFIG), {
        "env_args.backend.kind": "llm", "env_args.backend.model": "qwen2.5-7b-instruct",
        "env_args.backend.base_url": "http://127.0.0.1:8080/v1", "env_args.backend.dataset": "humaneval",
        "env_args.backend.cache_path": "runs/cache.sqlite", "env_args.domain": "code"})
    env_config = gymma_env_config(None, {k: v for k, v in config["env_args"].items() if k not in GYMMA_OWN_ARGS})
    assert env_config.backend == LLMBackendConfig(model="qwen2.5-7b-instruct", base_url="http://127.0.0.1:8080/v1",
                                                  dataset="humaneval", cache_path="runs/cache.sqlite")
    bad = with_overrides(load_yaml(EPYMARL_CONFIG), {"env_args.backend.kind": "llm", "env_args.backend.model": "m",
                                                      "env_args.domain": "code"})
    with pytest.raises(ConfigError, match="dataset"):  # an llm backend without its dataset: named
        gymma_env_config(None, {k: v for k, v in bad["env_args"].items() if k not in GYMMA_OWN_ARGS})


# ---------------------------------------------------------------------------------------
# BenchMARL
# ---------------------------------------------------------------------------------------


def small_experiment_config(folder: Path):
    from benchmarl.experiment import ExperimentConfig

    cfg = ExperimentConfig.get_from_yaml()
    cfg.max_n_iters, cfg.max_n_frames = 2, None
    cfg.off_policy_collected_frames_per_batch = 12
    cfg.off_policy_n_envs_per_worker = 2
    cfg.off_policy_n_optimizer_steps = 2
    cfg.off_policy_train_batch_size = 8
    cfg.off_policy_memory_size = 100
    cfg.exploration_anneal_frames = 24
    cfg.evaluation, cfg.render, cfg.loggers, cfg.create_json = False, False, [], False
    cfg.checkpoint_at_end = False
    cfg.save_folder = str(folder)
    return cfg


def test_benchmarl_qmix_experiment_respects_the_mask(tmp_path):
    from benchmarl.algorithms import QmixConfig
    from benchmarl.experiment import Experiment
    from benchmarl.models.mlp import MlpConfig

    from topo_env.interop.benchmarl_task import TopoMARLTask

    task = TopoMARLTask.TOPOLOGY.get_task(config={"rounds": 2, "disabled_actions": DISABLED})
    experiment = Experiment(task=task, algorithm_config=QmixConfig.get_from_yaml(),
                            model_config=MlpConfig.get_from_yaml(), seed=0,
                            config=small_experiment_config(tmp_path))
    assert experiment.action_mask_spec["agent", "action_mask"].shape == (3, 6)
    assert "state" in experiment.state_spec.keys()
    assert experiment.group_map == {"agent": ["agent_0", "agent_1", "agent_2"]}
    experiment.run()
    assert experiment.n_iters_performed == 2 and experiment.total_frames == 24
    stored = experiment.replay_buffers["agent"][:]
    actions = stored["agent", "action"]
    assert actions.numel() > 0 and not np.isin(actions.numpy(), DISABLED_IDX).any()
    assert stored["agent", "action_mask"][..., DISABLED_IDX].sum() == 0
    # the two rows of the vectorised env play different tasks (seeds 0, 1, 2, ...): 12 episodes, 12 tasks
    starts = stored["state"][:, -1] == 0  # the state ends with round / rounds
    first_obs = stored["agent", "observation", "observation"][starts, 0]
    embed_dim = task.env_config.embed_dim
    assert len(first_obs) == 12 and len({tuple(o[:embed_dim].tolist()) for o in first_obs}) == 12


def test_benchmarl_task_from_yaml_and_its_checks():
    from topo_env.interop.benchmarl_task import DEFAULT_YAML, SeededEnvMaker, TopoMARLClass, TopoMARLTask

    task = TopoMARLTask.TOPOLOGY.get_from_yaml()
    assert isinstance(task, TopoMARLClass) and task.env_config == EnvConfig.from_dict(task.config)
    assert task.supports_discrete_actions() and not task.supports_continuous_actions() and task.has_state()
    env = task.get_env_fun(num_envs=2, continuous_actions=False, seed=0, device="cpu")()  # vectorised: 2 rows
    first_obs = env.reset()["agent", "observation", "observation"]
    assert first_obs.shape[0] == 2 and not torch.equal(first_obs[0], first_obs[1])  # seeds 0, 1
    again = task.get_env_fun(num_envs=2, continuous_actions=False, seed=0, device="cpu")()
    assert torch.equal(first_obs, again.reset()["agent", "observation", "observation"])
    make = SeededEnvMaker(task.env_config, 0, "cpu")  # the one-episode envs of LLM teams
    first, second = (make().reset()["agent", "observation", "observation"] for _ in range(2))
    assert not torch.equal(first, second)  # seeds 0, 1
    assert task.max_steps(env) == task.env_config.rounds
    assert set(task.observation_spec(env)["agent"].keys()) == {"observation"}
    assert set(task.action_mask_spec(env)["agent"].keys()) == {"action_mask"}
    assert "accuracy" in task.info_spec(env)["agent", "info"].keys()
    batch = env.rollout(4, break_when_any_done=False)
    logged = TopoMARLClass.log_info(batch)
    assert set(logged) == {f"collection/episode_end/{k}" for k in ("accuracy", "team_tokens", "density")}
    done = batch["next", "done"].squeeze(-1)
    assert logged["collection/episode_end/team_tokens"] == pytest.approx(
        batch["next", "agent", "info", "team_tokens"][done][:, 0].mean().item())
    with pytest.raises(ConfigError, match="rounds"):
        TopoMARLTask.TOPOLOGY.get_task(config={"rounds": 0})
    bad = DEFAULT_YAML.parent / "does_not_exist.yaml"
    with pytest.raises(ConfigError, match="does not exist"):
        TopoMARLTask.TOPOLOGY.get_from_yaml(bad)


def test_benchmarl_task_renders_pictures_only_in_rgb_array_mode():
    from topo_env.interop.benchmarl_task import TopoMARLTask

    assert not TopoMARLTask.TOPOLOGY.get_from_yaml().has_render(None)
    task = TopoMARLTask.TOPOLOGY.get_task(config={"rounds": 2, "render_mode": "rgb_array"})
    env = task.get_env_fun(num_envs=1, continuous_actions=False, seed=0, device="cpu")()
    assert task.has_render(env)
    frames = []  # BenchMARL's evaluation calls render_callback after every step but the last
    env.rollout(3, callback=lambda e, td: frames.append(task.render_callback(None, e, td)), break_when_any_done=False)
    assert len(frames) == 2
    assert all(isinstance(f, np.ndarray) and f.dtype == np.uint8 and f.ndim == 3 and f.shape[2] == 3 for f in frames)
    assert frames[0].shape == frames[1].shape  # BenchMARL stacks them into a video
