"""Faults in a run over seeds (learners/seeds.py): a seed killed by SIGKILL takes no other seed down,
the finished seeds are still summarised, and rerunning the same command trains only what is missing,
ending where an uninterrupted run ends; a finished run is kept, another config's is not reused."""
from __future__ import annotations

import json
import multiprocessing
import os
import signal
import threading
import time

import pytest

from learners.config import load_experiment
from learners.seeds import KEEP, RESUME, RETRAIN, TRAIN, describe_plan, plan_seeds, run_seeds
from learners.training import RunOptions
from run_checks import ONE_EPISODE_CONFIG
from topo_env.engine.cli import RunError

# costly module fixtures: pytest-xdist (--dist loadgroup, pyproject.toml) builds them once, on one worker
pytestmark = pytest.mark.xdist_group("test_seeds_faults")

EPISODES = 48  # checkpoints every 4: the kill lands well before the end
QUIET = RunOptions(progress=False, pictures=False)


def tiny(*sets: str, episodes: int = EPISODES):
    """A few-second run of the one-episode loop, with ``sets``."""
    return load_experiment(ONE_EPISODE_CONFIG, [
        "qmix.hidden_dim=16", "qmix.batch_size=4", "train.warmup_episodes=4", "train.eval_episodes=5",
        "train.references=false", "train.checkpoint_every=4", "train.log_every=8", f"train.episodes={episodes}", *sets])


def figures(summary: dict) -> dict:
    """A summary without its wall times."""
    return {k: v for k, v in summary.items() if k != "train_seconds"}


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    """An uninterrupted run of seeds 0 and 1: its folder and summary."""
    out = tmp_path_factory.mktemp("straight")
    return out, run_seeds(tiny(), [0, 1], out, 2, QUIET)


def kill_at_first_checkpoint(run_dir, killed: list) -> None:
    """SIGKILL the child training into ``run_dir`` once its first checkpoint is written."""
    deadline = time.monotonic() + 120
    while not (run_dir / "checkpoint.pt").exists() and time.monotonic() < deadline:
        time.sleep(0.005)
    for child in multiprocessing.active_children():
        if child.name == f"train {run_dir}":
            os.kill(child.pid, signal.SIGKILL)
            killed.append(child.pid)


def test_a_killed_seed_is_reported_and_a_rerun_trains_only_it(tmp_path, straight, capsys):
    out, killed = tmp_path / "cut", []
    killer = threading.Thread(target=kill_at_first_checkpoint, args=(out / "seed1", killed))
    killer.start()
    with pytest.raises(RunError) as err:
        run_seeds(tiny(), [0, 1], out, 2, QUIET)
    killer.join()
    assert killed and not (out / "seed1" / "results.json").exists()
    message = str(err.value)
    assert f"seed 1 killed by signal SIGKILL (9) (log: {out / 'seed1' / 'train.log'})" in message
    assert "seed 0" not in message and "trains only seeds [1]" in message
    log = (out / "seed1" / "train.log").read_text().splitlines()
    assert "Traceback" not in "\n".join(log) and log[-1].startswith("killed by signal SIGKILL (9): the system may")
    partial = json.loads((out / "seeds.json").read_text())
    assert partial["seeds"] == [0] and partial["missing"] == [1]
    assert "partial summary: seeds [1] did not finish" in capsys.readouterr().out

    kept = (out / "seed0" / "results.json").stat().st_mtime_ns
    summary = run_seeds(tiny(), [0, 1], out, 2, QUIET)
    plan_line = "keeping 0 (finished with this config); resuming 1 (from its checkpoint at episode"
    assert plan_line in capsys.readouterr().err
    assert (out / "seed0" / "results.json").stat().st_mtime_ns == kept
    assert summary["missing"] == [] and figures(summary) == figures(straight[1])
    assert figures(json.loads((out / "seeds.json").read_text())) == figures(straight[1])


def test_a_rerun_of_finished_seeds_trains_nothing(straight, capsys):
    out, summary = straight
    times = [(out / f"seed{s}" / "results.json").stat().st_mtime_ns for s in (0, 1)]
    assert run_seeds(tiny(), [0, 1], out, 2, QUIET) == summary
    assert capsys.readouterr().err.strip() == f"seeds in {out}: keeping 0 1 (finished with this config)"
    assert [(out / f"seed{s}" / "results.json").stat().st_mtime_ns for s in (0, 1)] == times


def test_a_run_saved_before_a_config_key_was_added_is_kept(straight, tmp_path):
    out, _ = straight
    older = tmp_path / "older"
    for seed in (0, 1):
        (older / f"seed{seed}").mkdir(parents=True)
        results = json.loads((out / f"seed{seed}" / "results.json").read_text())
        del results["config"]["sim_scale"]["teacher_lr_schedule"]  # the key's default keeps the old behaviour
        if seed == 1:
            results["config"]["sim_scale"]["teacher_warmup"] = 3  # a key this version does not know
        (older / f"seed{seed}" / "results.json").write_text(json.dumps(results))
    assert {s: p.action for s, p in plan_seeds(tiny(), [0, 1], older).items()} == {0: KEEP, 1: RETRAIN}


def test_runs_of_another_config_are_not_reused(straight, tmp_path):
    out, _ = straight
    assert {s: p.action for s, p in plan_seeds(tiny(), [0, 1, 2], out).items()} == {0: KEEP, 1: KEEP, 2: TRAIN}
    longer = plan_seeds(tiny(episodes=EPISODES + 4), [0, 1], out)
    assert {s: p.action for s, p in longer.items()} == {0: RETRAIN, 1: RETRAIN}
    assert describe_plan(out, longer).endswith("training 0 1 afresh (the earlier run there is of another config: "
                                               "not reused)")
    assert plan_seeds(tiny("train.eval_episodes=6"), [0], out)[0].action == RESUME  # evaluated again, not trained
    cut = tmp_path / "seed0"  # a checkpoint without results: resumed by the same config only
    cut.mkdir()
    (cut / "checkpoint.pt").symlink_to(out / "seed0" / "checkpoint.pt")
    assert plan_seeds(tiny(), [0], tmp_path)[0].action == RESUME
    assert plan_seeds(tiny(episodes=EPISODES + 4), [0], tmp_path)[0].action == RETRAIN
    assert plan_seeds(tiny("qmix.lr=0.001"), [0], tmp_path)[0].action == RETRAIN
    assert plan_seeds(tiny("train.token_budget=1000000000"), [0], tmp_path)[0].action == RESUME  # resumes may change it


def test_seeds_at_once_search_their_references_once_before_any_starts(tmp_path, monkeypatch):
    """Seeds trained at once would each search the same references: run_seeds searches them once first
    (learners.training.search_references_once), before any seed has results."""
    import learners.seeds as seeds_module

    calls = []
    monkeypatch.setattr(seeds_module, "search_references_once",
                        lambda cfg: calls.append((cfg.train.episodes, sorted(p.name for p in tmp_path.rglob("results.json")))))
    run_seeds(tiny(episodes=8), [0, 1], tmp_path / "at_once", 2, QUIET)
    assert calls == [(8, [])]
