"""Injected adversaries: random placement per episode (reproducible, never observed, the same
in the env, the batch simulator and the LLM team) and the robustness study (studies/robustness.py)."""
from __future__ import annotations

import json
import math
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from studies import robustness
import train_qmix
from run_checks import ONE_EPISODE_CONFIG
import topo_env
from agents_llm.prompts import system_prompt
from fake_openai_server import FakeOpenAIServer
from topo_env.references.baselines import BASELINES
from topo_env.frontends.env_config import EnvConfig
from topo_env.engine.config_checks import ConfigError
from topo_env.sim.batch import TaskArrays
from topo_env.frontends.comm_batch import CommBatchSimulator
from topo_env.sim.profiles import get_profile

torch.set_num_threads(1)

POLICIES = ("qmix",) + BASELINES
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


# -- the env -------------------------------------------------------------------------------


def test_random_placement_is_reproducible_varies_and_keeps_task_and_noise():
    attacked = topo_env.parallel_env(adversary_position="random", n_adversaries=1)
    again = topo_env.parallel_env(adversary_position="random", n_adversaries=1)
    clean = topo_env.parallel_env()
    seen = []
    for seed in range(60):
        attacked.reset(seed=seed)
        again.reset(seed=seed)
        clean.reset(seed=seed)
        assert attacked.adversaries == again.adversaries and len(attacked.adversaries) == 1
        assert clean.adversaries == ()
        # drawn after the task and the noise: the clean episode of the same seed is the same episode
        assert attacked.task == clean.task
        np.testing.assert_array_equal(attacked.backend.noise.calls, clean.backend.noise.calls)
        seen.append(attacked.adversaries[0])
    counts = np.bincount(seen, minlength=3)
    assert (counts >= 8).all(), counts  # every agent is drawn, roughly uniformly (expected 20 each)
    env = topo_env.parallel_env(n_agents=5, adversary_position="random", n_adversaries=2)
    sets = set()
    for seed in range(30):
        env.reset(seed=seed)
        adv = env.adversaries
        assert len(adv) == 2 and len(set(adv)) == 2 and list(adv) == sorted(adv) and all(0 <= i < 5 for i in adv)
        sets.add(adv)
    assert len(sets) >= 5


def test_the_adversary_is_not_in_observations_infos_or_state():
    """Same seed, different placements: identical observations, infos and state at reset,
    and the same observation space as the clean env."""
    env = topo_env.parallel_env(adversary_position="random", n_adversaries=1)
    clean = topo_env.parallel_env()
    assert env.observation_space("agent_0") == clean.observation_space("agent_0")
    views = []
    for forced in ([0], [1], [2], []):
        obs, infos = env.reset(seed=5, options={"adversaries": forced})
        assert env.adversaries == tuple(forced)
        views.append((obs, infos, env.state()))
    obs_c, infos_c = clean.reset(seed=5)
    views.append((obs_c, infos_c, clean.state()))
    first_obs, first_infos, first_state = views[0]
    for obs, infos, state in views[1:]:
        for agent in env.possible_agents:
            np.testing.assert_array_equal(obs[agent]["observation"], first_obs[agent]["observation"])
            assert infos[agent].keys() == first_infos[agent].keys()
            for key, value in infos[agent].items():
                np.testing.assert_array_equal(value, first_infos[agent][key])
        np.testing.assert_array_equal(state, first_state)


def test_forced_adversary_answers_like_an_adversary_and_shows_in_the_transcript():
    env = topo_env.parallel_env(adversary_position="random", n_adversaries=1, render_mode="ansi")
    env.reset(seed=3, options={"adversaries": [1]})
    while env.agents:
        env.step({a: 1 for a in env.agents})  # everyone broadcasts
    adversary_calls = [c for r in env.history for c in r.calls if c.agent == 1]
    assert adversary_calls and all(c.reply.answer == env.task.hidden["trap"] for c in adversary_calls)
    assert len({c.reply.confidence for c in adversary_calls}) > 1  # an honest-looking confidence, not a constant
    assert "adversaries: agent_1" in env.render()
    env.reset(seed=3, options={"adversaries": []})
    assert "adversaries:" not in env.transcript()


def test_pettingzoo_api_seed_and_pickle_with_random_placement():
    from pettingzoo.test import parallel_api_test, parallel_seed_test

    cfg = dict(n_agents=4, rounds=2, adversary_position="random", n_adversaries=2)
    parallel_api_test(topo_env.parallel_env(**cfg), num_cycles=10)
    parallel_seed_test(lambda: topo_env.parallel_env(**cfg), num_cycles=10)
    env = topo_env.parallel_env(**cfg)
    env.reset(seed=9)
    copy = pickle.loads(pickle.dumps(env))
    assert copy.adversaries == env.adversaries
    for e in (env, copy):
        while e.agents:
            e.step({a: 1 for a in e.agents})
    assert copy.transcript() == env.transcript()


@pytest.mark.parametrize("forced, words", [
    ([3], ["options['adversaries'] contains 3"]),
    ([0, 1, 2], ["leaves no honest agent"]),
    ([1, 1], ["repeats"]),
    (1, ["must be a list"]),
])
def test_bad_forced_placement_is_refused_and_changes_nothing(forced, words):
    env = topo_env.parallel_env(adversary_position="random", n_adversaries=1)
    env.reset(seed=1)
    task, adversaries = env.task, env.adversaries
    with pytest.raises(ValueError) as err:
        env.reset(seed=2, options={"adversaries": forced})
    for word in words:
        assert word in str(err.value)
    assert env.task == task and env.adversaries == adversaries


@pytest.mark.parametrize("kw, words", [
    (dict(adversary_position="random"), ["n_adversaries >= 1", "None"]),
    (dict(adversary_position="random", n_adversaries=3), ["n_adversaries=3", "honest"]),
    (dict(adversary_position="random", n_adversaries=1, adversarial_agents=[0]), ["adversarial_agents=[0]", "random"]),
    (dict(adversarial_agents=[0], n_adversaries=2), ["n_adversaries=2", "adversarial_agents=[0]"]),
    (dict(adversary_position="left"), ["adversary_position='left'", "fixed", "random"]),
    (dict(adversary_position="random", n_adversaries=1.5), ["n_adversaries=1.5"]),
])
def test_placement_config_errors(kw, words):
    with pytest.raises(ConfigError) as err:
        EnvConfig(**kw)
    for word in words:
        assert word in str(err.value)


# -- the batch simulator ---------------------------------------------------------------------


@pytest.mark.parametrize("case", [
    dict(profile="mmlu_pro", n_agents=3, rounds=2, n_adversaries=1, target_rule="disagree"),
    dict(profile="humaneval", n_agents=4, rounds=2, n_adversaries=2, target_rule="confident"),
], ids=["mmlu_pro", "humaneval"])
def test_batch_simulator_agrees_with_the_env_under_random_placement(case):
    """Per-episode (B, N) adversary masks: same answers, tokens and rewards as the env."""
    env = topo_env.parallel_env(adversary_position="random", **case)
    sim = CommBatchSimulator.from_config(env.config)
    rng = np.random.default_rng(7)
    t, n = case["rounds"], case["n_agents"]
    tasks, noises, actions, rewards, tokens, accs, masks = [], [], [], [], [], [], []
    for ep in range(120):
        acts = rng.integers(6, size=(t, n))
        env.reset(seed=500 + ep)
        tasks.append(env.task)
        noises.append(env.backend.noise)
        mask = np.zeros(n, bool)
        mask[list(env.adversaries)] = True
        masks.append(mask)
        for r in range(t):
            _, rew, _, _, info = env.step({f"agent_{i}": int(acts[r, i]) for i in range(n)})
        actions.append(acts)
        rewards.append(rew["agent_0"])
        tokens.append(info["agent_0"]["team_tokens"])
        accs.append(info["agent_0"]["accuracy"])
    masks = np.stack(masks)
    assert len({tuple(m) for m in masks}) > 1  # placements really vary
    noise = type(noises[0]).concatenate(noises)
    res = sim.run(np.stack(actions), TaskArrays.from_tasks(tasks), noise, adversaries=masks)
    np.testing.assert_array_equal(res.tokens, tokens)
    np.testing.assert_array_equal(res.accuracy, accs)
    np.testing.assert_allclose(res.reward, rewards, rtol=0, atol=1e-12)


def test_batch_sample_adversaries_and_mask_errors():
    sim = CommBatchSimulator(get_profile("mmlu_pro"), 4, 2, adversary_position="random", n_adversaries=2)
    masks = sim.sample_adversaries(np.random.default_rng(0), 4000)
    assert masks.shape == (4000, 4) and masks.dtype == bool
    assert (masks.sum(axis=1) == 2).all()
    np.testing.assert_allclose(masks.mean(axis=0), 0.5, atol=0.04)  # each agent in half the episodes
    np.testing.assert_array_equal(masks, sim.sample_adversaries(np.random.default_rng(0), 4000))
    tasks, noise = sim.sample(np.random.default_rng(1), 8)
    with pytest.raises(ValueError, match="adversaries mask"):
        sim.run(np.ones((2, 4), np.int64), tasks, noise)  # random placement needs the masks
    with pytest.raises(ValueError, match=r"shape \(B, N\) = \(8, 4\)"):
        sim.run(np.ones((2, 4), np.int64), tasks, noise, adversaries=np.zeros((8, 3), bool))
    with pytest.raises(ValueError, match="no honest agent"):
        sim.run(np.ones((2, 4), np.int64), tasks, noise, adversaries=np.ones((8, 4), bool))
    fixed = CommBatchSimulator(get_profile("mmlu_pro"), 3, 2, adversarial_agents=(2,))
    np.testing.assert_array_equal(fixed.sample_adversaries(np.random.default_rng(0), 3), [[False, False, True]] * 3)


# -- the LLM team ----------------------------------------------------------------------------


def reasoning_dataset(path: Path) -> Path:
    rows = [{"id": f"q{i}", "domain": "reasoning", "prompt": f"Question {i}: which option?",
             "choices": ["alpha", "beta", "gamma", "delta"], "reference": "B"} for i in range(6)]
    path.write_text("\n".join(json.dumps(r) for r in rows))
    return path


def llm_settings(server: FakeOpenAIServer, tmp_path: Path) -> dict:
    return dict(domain="reasoning", backend={"kind": "llm", "dataset": str(reasoning_dataset(tmp_path / "r.jsonl")),
                                             "train_size": 2, "model": "team-model", "base_url": server.base_url,
                                             "api_key": "sk-test", "backoff_s": 0.01, "timeout_s": 5.0,
                                             "cache_path": None})


def is_adversarial(request: dict) -> bool:
    return "mislead" in request["messages"][0]["content"]


def test_llm_team_gives_the_adversarial_prompt_to_the_drawn_agent_only(tmp_path):
    """Requests of one layer arrive in any order, so agents are told apart by their system
    prompts: the honest agents' own prompts (persona and role) and the adversary's."""
    with FakeOpenAIServer([("ok", "Answer: B\nConfidence: 0.7", {"prompt_tokens": 5, "completion_tokens": 3})]) as srv:
        env = topo_env.parallel_env(adversary_position="random", n_adversaries=1, **llm_settings(srv, tmp_path),
                                    personas=["logician", "fact checker", "critical reviewer"])  # 3 distinct prompts
        backend = env.backend
        drawn = set()
        for seed in range(6):
            before = len(srv.requests)
            env.reset(seed=seed)
            while env.agents:
                env.step({a: 0 for a in env.agents})  # solo: one request per agent and round
            requests = srv.requests[before:-1]  # the last one is FinalRefer's
            assert not is_adversarial(srv.requests[-1])
            honest = [i for i in range(3) if i not in env.adversaries]
            expected = {system_prompt("reasoning", backend.roles[i], backend.personas[i], False) for i in honest}
            assert len(expected) == len(honest)
            assert sum(map(is_adversarial, requests)) == len(env.adversaries) * env.rounds
            assert {r["messages"][0]["content"] for r in requests if not is_adversarial(r)} == expected
            drawn.update(env.adversaries)
        assert len(drawn) > 1


# -- studies/robustness.py -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory) -> Path:
    """A 16-episode QMIX run on the clean default setting (8 held-out episodes per policy)."""
    out = tmp_path_factory.mktemp("tiny")
    assert train_qmix.main(["--config", ONE_EPISODE_CONFIG, "--episodes", "16", "--set", "train.references=false",
                            "--set", "train.eval_episodes=8",
                            "--set", "train.warmup_episodes=8", "--set", "learner.batch_size=8",
                            "--set", "learner.hidden_dim=16", "--set", "train.log_every=8",
                            "--no-progress", "--out", str(out)]) == 0
    return out


def test_robustness_end_to_end_on_a_checkpoint(tiny_run, tmp_path, capsys):
    out = tmp_path / "robust"
    assert robustness.main(["--checkpoint", str(tiny_run), "--adversarial", "1", "--adversary-position", "random",
                          "--no-progress", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    for words in ("Table 2", "Table 3", "acc clean", "acc attacked", "drop (pts)", "total clean",
                  "action distribution per round", "out-degree", "qmix", "full"):
        assert words in printed, words
    res = json.loads((out / "robustness.json").read_text())
    results = json.loads((tiny_run / "results.json").read_text())["eval"]
    assert res["episodes"] == 8 and res["attack"]["position"] == "random" and res["attack"]["n_adversaries"] == 1
    keys = set(res["clean"]["qmix"])
    for run in ("clean", "attacked"):
        assert list(res[run]) == list(POLICIES)
        for policy in POLICIES:
            entry = res[run][policy]
            assert set(entry) == keys  # every policy has the same keys ...
            assert set(results["qmix"]) <= keys  # ... those of results.json's entries and more
            assert entry["episodes"] == 8 and 0.0 <= entry["accuracy"] <= 1.0
            assert math.isfinite(entry["adversary_out_degree"]) and math.isfinite(entry["honest_out_degree"])
            assert entry["total_tokens"] == pytest.approx(8 * entry["tokens_per_task"])
    for policy in POLICIES:  # the clean run is the run's own held-out evaluation: same seeds, same episodes
        for key in ("reward", "accuracy", "tokens_per_task", "density"):
            assert res["clean"][policy][key] == pytest.approx(results[policy][key], abs=1e-12), (policy, key)
        drop = res["drop"][policy]["points"]
        assert drop == pytest.approx(100 * (res["clean"][policy]["accuracy"] - res["attacked"][policy]["accuracy"]))
    # full broadcasting sends 2 edges per agent and round, adversary or not
    assert res["attacked"]["full"]["adversary_out_degree"] == 2.0 and res["clean"]["solo"]["adversary_out_degree"] == 0.0
    per_episode = res["adversaries"]["per_episode"]
    assert len(per_episode) == 8 and all(len(a) == 1 for a in per_episode)
    assert sum(res["adversaries"]["count_by_agent"]) == 8
    for name in ("robustness.png", "actions_qmix.png", "topology_qmix_clean.png", "topology_qmix_attacked.png"):
        assert (out / name).read_bytes()[:8] == PNG_MAGIC, name
    # the same command again: the same figures (placements, episodes, policy)
    again = tmp_path / "again"
    assert robustness.main(["--checkpoint", str(tiny_run / "checkpoint.pt"), "--no-progress", "--no-plots", "--json",
                          "--out", str(again)]) == 0
    rerun = json.loads(capsys.readouterr().out)
    assert rerun.pop("checkpoint") == str(tiny_run / "checkpoint.pt") and res.pop("checkpoint") == str(tiny_run)
    assert rerun == res


def test_robustness_fixed_position_baselines_only(tmp_path, capsys):
    out = tmp_path / "fixed"
    assert robustness.main(["--adversary-position", "2", "--episodes", "12", "--policies", "full,chain,solo",
                          "--set", "train.seed=4", "--no-progress", "--no-plots", "--out", str(out)]) == 0
    res = json.loads((out / "robustness.json").read_text())
    assert list(res["clean"]) == ["full", "chain", "solo"] and res["seed"] == 4
    assert res["adversaries"]["per_episode"] == [[2]] * 12 and res["attack"]["position"] == [2]
    chain = res["attacked"]["chain"]
    assert chain["adversary_out_degree"] == pytest.approx(chain["out_degree_by_agent"][2])  # the chain's end sends nothing
    assert chain["adversary_out_degree"] == 0.0 and res["clean"]["chain"]["adversary_out_degree"] == 0.0
    assert "Table 2" in capsys.readouterr().out


def test_robustness_with_episodes_in_flight_gives_the_same_figures(tmp_path):
    """train.episodes_in_flight only changes how many episodes run at once, not what they give."""
    results = []
    for k in (1, 3):
        out = tmp_path / f"k{k}"
        assert robustness.main(["--adversary-position", "random", "--episodes", "10", "--policies", "full,solo",
                                "--set", f"runtime.episodes_in_flight={k}", "--set", "sim_scale.batch=0",
                                "--no-progress", "--no-plots",
                                "--out", str(out)]) == 0
        results.append(json.loads((out / "robustness.json").read_text()))
    for key in ("clean", "attacked", "drop", "adversaries"):
        assert results[0][key] == results[1][key], key


def test_robustness_with_the_llm_backend(tmp_path, capsys):
    with FakeOpenAIServer([("ok", "Answer: B\nConfidence: 0.7", {"prompt_tokens": 5, "completion_tokens": 3})]) as srv:
        config = tmp_path / "llm.yaml"
        config.write_text(yaml.safe_dump({"env": llm_settings(srv, tmp_path)}))
        out = tmp_path / "llm"
        assert robustness.main(["--config", str(config), "--policies", "solo", "--episodes", "3", "--no-progress",
                              "--no-plots", "--out", str(out)]) == 0
        res = json.loads((out / "robustness.json").read_text())
        adversarial = [r for r in srv.requests if is_adversarial(r)]
    assert res["config"]["env"]["backend"]["kind"] == "llm" and "api_key" not in json.dumps(res)
    # solo, 2 rounds: one adversarial request per attacked episode and round, none in the clean run
    assert len(adversarial) == 3 * 2
    assert res["clean"]["solo"]["accuracy"] == res["attacked"]["solo"]["accuracy"] == 1.0  # the fake model says B
    # 3 episodes x (3 agents x 2 rounds + FinalRefer) requests x 8 tokens each, in both runs
    assert res["clean"]["solo"]["total_tokens"] == res["attacked"]["solo"]["total_tokens"] == 3 * 7 * 8


@pytest.mark.parametrize("argv, words", [
    (["--adversarial", "3"], ["--adversarial 3", "n_agents=3", "no honest agent"]),
    (["--adversary-position", "7"], ["--adversary-position '7'", "7", "0..2"]),
    (["--adversary-position", "0,1"], ["names 2 agent(s)", "--adversarial is 1"]),
    (["--adversary-position", "first"], ["'first'", "random"]),
    (["--adversarial", "0"], ["'0' must be >= 1"]),
    (["--policies", "qmix"], ["qmix needs --checkpoint"]),
    (["--policies", "full,ring"], ["unknown policy 'ring'"]),
    (["--checkpoint", "/nonexistent/run"], ["/nonexistent/run", "not found"]),
    (["--set", "env.n_agents=1"], ["n_agents=1"]),
])
def test_robustness_bad_input(argv, words, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        robustness.main([*argv, "--no-progress", "--out", str(tmp_path / "never")])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    for word in words:
        assert word in err, (word, err)
    assert not (tmp_path / "never").exists()
