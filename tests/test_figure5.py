"""studies.figure5 (the paper's Figure 5 on the simulated team) and the env key it sweeps, ``train_tasks``.

``train_tasks`` K: train-split episodes draw among the split's first K tasks, the same in the PettingZoo env
and SimVectorEnv (one task source), the eval split untouched, the config dict unchanged when unset. The
sweep: a tiny one (two trained points and the one-agent point, two seeds, tiny episodes, cheap references,
in this process) writes the tables, figure5.json, figure5.md and figure5.png with every figure, and a rerun
trains nothing."""
from __future__ import annotations

import json

import numpy as np
import pytest

from agents_llm.team import TaskPool
from topo_env.engine.config_checks import ConfigError
from topo_env.engine.tasks import Task
from topo_env.frontends.env_config import EnvConfig
from topo_env.frontends.parallel_env import TopologyParallelEnv
from topo_env.frontends.vector_env import SimVectorEnv
from topo_env.references import headroom
from topo_env.references.reading import cached_posterior_policy

SEEDS = list(range(300, 360))


def test_train_tasks_is_checked_and_written_only_when_set():
    with pytest.raises(ConfigError, match=r"^train_tasks=0: must be an integer >= 1$"):
        EnvConfig(train_tasks=0)
    assert "train_tasks" not in EnvConfig().to_dict()  # configs, fingerprints and kept runs read as before
    assert EnvConfig.from_dict(EnvConfig(train_tasks=7).to_dict()).train_tasks == 7


def test_with_train_tasks_env_and_vector_env_draw_the_same_k_tasks_and_eval_is_unchanged():
    config = EnvConfig(train_tasks=5, embed_dim=16)
    env, venv = TopologyParallelEnv(config), SimVectorEnv(config)
    tasks, noise, adversaries = headroom.env_episodes(env, SEEDS, "train")
    drawn, task_objects = venv.sample_episodes(SEEDS, "train")
    for field in ("difficulty", "latent", "prompt_tokens", "subject"):
        np.testing.assert_array_equal(getattr(tasks, field), getattr(drawn.tasks, field))
    for name in ("calls", "decision", "blind"):
        np.testing.assert_array_equal(getattr(noise, name), getattr(drawn.noise, name))
    np.testing.assert_array_equal(adversaries, drawn.adversaries)
    assert {t.id for t in task_objects} == {f"mmlu_pro-train-{k}" for k in range(5)}
    unrestricted = SimVectorEnv(EnvConfig(embed_dim=16))
    assert len({t.id for t in unrestricted.sample_episodes(SEEDS, "train")[1]}) == len(SEEDS)
    held_out = [t.id for t in venv.sample_episodes(SEEDS, "eval")[1]]
    assert held_out == [t.id for t in unrestricted.sample_episodes(SEEDS, "eval")[1]]


def test_an_llm_teams_task_pool_keeps_its_first_k_train_tasks():
    tasks = [Task(id=f"q{i}", domain="reasoning", prompt=f"question {i}", reference="A") for i in range(30)]
    pool, whole = TaskPool(tasks, train_size=20, train_tasks=3), TaskPool(tasks, train_size=20)
    drawn = {pool.sample(np.random.default_rng(s), "train").id for s in range(60)}
    assert drawn == {t.id for t in whole.splits["train"][:3]}
    assert [pool.sample(np.random.default_rng(s), "eval").id for s in range(20)] == \
           [whole.sample(np.random.default_rng(s), "eval").id for s in range(20)]


TINY = ["train.episodes=256", "train.eval_episodes=400", "sim_scale.teacher_episodes=0", "train.validate_every=0",
        "train.curve_every=0", "train.checkpoint_every=256", "train.log_every=256", "sim_scale.batch=256",
        "sim_scale.noise_samples=2", "qmix.batch_size=64", "train.warmup_episodes=64", "env.embed_dim=16",
        "qmix.hidden_dim=8", "qmix.mixer_embed_dim=8", "qmix.hypernet_dim=8", "env.n_agents=2", "env.rounds=1"]


@pytest.fixture()
def cheap_references(tmp_path, monkeypatch):
    """A cache of references in ``tmp_path``, selected on few episodes."""
    monkeypatch.setenv("TOPOMARL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(headroom, "REFERENCE_SELECTION", {**headroom.REFERENCE_SELECTION, "samples": 400,
                                                          "rerank_samples": 800})


@pytest.fixture()
def tiny_sweep(tmp_path, cheap_references):
    """``main`` of a tiny sweep into ``tmp_path / "sweep"``: the agents panel at N = 1, 2 and the tasks panel
    at K = 100 and all, seeds 0 and 1, in this process, references selected on few episodes."""
    from studies import figure5

    out = tmp_path / "sweep"
    args = ["--out", str(out), "--seeds", "0", "1", "--panels", "agents", "tasks", "--agents", "1", "2",
            "--tasks", "100", "all", "--jobs", "0", "--no-pictures", "--no-progress"]
    for key in TINY:
        args += ["--set", key]
    return lambda *more: figure5.main([*args, *more]), out


def test_a_tiny_sweep_reports_every_figure_and_a_rerun_trains_nothing(tiny_sweep, capsys, monkeypatch):
    from learners import seeds

    run, out = tiny_sweep
    assert run("--no-train", "--out", str(out.parent / "nothing")) == 0  # a report of what finished: nothing
    empty = json.loads((out.parent / "nothing" / "figure5.json").read_text())
    assert empty["missing_points"] == ["points/n2-t1-k100-w1.25 (seeds 0, 1)", "points/n2-t1-kall-w1.25 (seeds 0, 1)"]
    assert "none finished" in capsys.readouterr().out
    assert run() == 0
    printed = capsys.readouterr().out
    assert "agents: team size N" in printed and "tasks: training tasks K" in printed and "paper:" in printed
    result = json.loads((out / "figure5.json").read_text())
    assert result["missing_points"] == [] and result["seeds"] == [0, 1]
    agents, tasks = result["panels"]["agents"], result["panels"]["tasks"]
    assert [r["value"] for r in agents["points"]] == [1, 2] and [r["value"] for r in tasks["points"]] == [100, None]
    alone, team = agents["points"]
    assert alone["alone"] and alone["point"] == "points/n1-t1-kall-w1.25"
    assert team["point"] == tasks["points"][1]["point"] == "points/n2-t1-kall-w1.25"  # one point, trained once
    for row in (team, *tasks["points"]):
        assert row["seeds"] == [0, 1] and not row["missing"]
        for policy in ("qmix", "best_fixed", "adaptive"):
            for figure in ("reward", "accuracy", "tokens_per_task"):
                assert set(row["policies"][policy][figure]) == {"mean", "se", "values"}
                assert len(row["policies"][policy][figure]["values"]) == 2
        assert {"headroom_share", "qmix_minus_best_fixed", "train_seconds"} <= set(row)
    config = json.loads((out / "points" / "n2-t1-k100-w1.25" / "seed1" / "results.json").read_text())["config"]
    assert config["env"]["train_tasks"] == 100 and config["train"]["seed"] == 1
    tokens = [row["policies"]["qmix"]["tokens_per_task"]["mean"] for row in (alone, team)]
    assert tokens[0] < tokens[1]  # one call against a team's
    assert agents["ours"].startswith("QMIX accuracy") and "Beyond-AIME" in agents["paper"]
    assert (out / "figure5.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    md = (out / "figure5.md").read_text()
    assert "| value | qmix reward |" in md and "| 1 (one agent alone) |" in md and "| panel | the paper reports |" in md

    finished = {p: p.stat().st_mtime_ns for p in (out / "points").rglob("results.json")}
    assert len(finished) == 4  # two trained points, two seeds each

    def no_training(*args, **kwargs):
        raise AssertionError("a finished point was trained again")

    monkeypatch.setattr(seeds, "run_logged", no_training)
    assert run("--markdown") == 0
    assert "| value | qmix reward |" in capsys.readouterr().out
    assert {p: p.stat().st_mtime_ns for p in (out / "points").rglob("results.json")} == finished
    again = json.loads((out / "figure5.json").read_text())
    assert again["panels"]["tasks"]["points"] == tasks["points"]
    assert run("--dry-run") == 0
    listing = capsys.readouterr().out
    assert f"{out / 'points' / 'n2-t1-k100-w1.25'}  seed 0: keep; seed 1: keep" in listing
    assert "one agent alone" in listing and "shared with a panel above" in listing
    assert "2 trained points, 0 with seeds left: 0 of their 4 seed runs still to run" in listing


def test_a_points_references_are_searched_once_before_its_seeds_start(cheap_references):
    from learners.config import load_experiment
    from studies import figure5

    cfg = load_experiment(None, [*TINY, "sim_scale.teacher_episodes=64"])
    figure5.search_references_once(cfg)
    assert headroom.cached_references(cfg.env, progress=False)[1]
    assert headroom.cached_references(cfg.env, progress=False, context="readable")[1]
    assert cached_posterior_policy(cfg.env, progress=False)[1]  # the teacher's value table too
