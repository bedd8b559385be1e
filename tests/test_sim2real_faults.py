"""The sim-to-real route (studies/sim2real.py) stopped and continued, and the user's mistakes.

Ctrl-C in each stage (record, fit, train, fine-tune, evaluate) ends the run with one line naming the
stage and the command that continues, and status 130; rerunning the same call then ends with the
results of an uninterrupted run, without redoing the finished stages (a recording continues from its
last complete chunk). A kill (SIGKILL, in a subprocess) likewise. The real team is the perturbed
mmlu_pro of tests/test_sim2real.py, with its small training settings; the fit's check and the
predictions run on few episodes (tests/sim2real_fault_run.py).
"""
from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import learners.training as training
import train_qmix
from experiments.fit_recovery import perturb
from learners.config import load_experiment
from sim2real_fault_run import interrupt_at, speed_up
from studies import sim2real
from test_sim2real import SMALL
from topo_env.engine.config_checks import ConfigError
from topo_env.fitting.fit import write_profile

# costly module fixtures: pytest-xdist (--dist loadgroup, pyproject.toml) builds them once, on one worker
pytestmark = pytest.mark.xdist_group("test_sim2real_faults")

BUDGET, FINETUNE, EPISODES = 600, 100, 64
SIM_SETS = SMALL[1::2]
COMMAND = "python train_qmix.py --config real_team.yaml --sim2real --real-calls 600 --finetune-calls 100"
STAGE_NUMBER = {stage: n for n, stage in enumerate(sim2real.STAGES, 1)}


@pytest.fixture(scope="module")
def patch():
    """The tests' speed-ups (:func:`sim2real_fault_run.speed_up`) for every run of this file."""
    with pytest.MonkeyPatch.context() as patch:
        speed_up(patch.setattr)
        yield patch


@pytest.fixture(scope="module")
def config(tmp_path_factory):
    """The real team's config: small held-out evaluation, and networks that fine-tune from the sim run's."""
    tmp = tmp_path_factory.mktemp("team")
    write_profile(perturb("mmlu_pro", 100)[1], tmp / "real.yaml")
    path = tmp / "real_team.yaml"
    path.write_text(yaml.safe_dump({"env": {"profile": str(tmp / "real.yaml"), "embed_dim": 64},
                                    "train": {"eval_episodes": 100, "references": False, "warmup_episodes": 4},
                                    "qmix": {"hidden_dim": 16, "dueling": True, "batch_size": 4}}))
    return path


def route(config: Path, out: Path, **changes) -> int:
    """One call of the route as train_qmix.py makes it for :data:`COMMAND` (``changes``: other arguments)."""
    arguments = {"real_calls": BUDGET, "finetune_calls": FINETUNE, "sim_sets": SIM_SETS, "sim_episodes": EPISODES,
                 "progress": False, "command": COMMAND, **changes}
    return sim2real.run(load_experiment(config), out, **arguments)


def figures(out: Path) -> dict:
    """What a run's results.json says, its timing and its folder's name aside."""
    summary = json.loads((out / "results.json").read_text().replace(str(out), "DIR"))
    del summary["sim2real"]["seconds"]
    return summary


@pytest.fixture(scope="module")
def reference(patch, config, tmp_path_factory):
    """An uninterrupted run's folder, the chunks its recording took and the batches or episodes
    each training learnt from (by folder name)."""
    out = tmp_path_factory.mktemp("reference") / "run"
    with pytest.MonkeyPatch.context() as spy:
        chunks, learnt = counting(spy, sim2real, "record_exploration"), counting(spy, training, "learn")
        assert route(config, out) == 0
    return out, len(chunks), trainings(learnt)


def counting(patch: pytest.MonkeyPatch, module, name: str) -> list:
    """Spy on ``module.name`` (it still runs): the list of its calls' positional arguments."""
    calls, original = [], getattr(module, name)
    patch.setattr(module, name, lambda *a, **k: calls.append(a) or original(*a, **k))
    return calls


def trainings(learnt: list) -> dict[str, int]:
    """The calls of learners.training.learn per training folder's name."""
    return {name: sum(1 for args in learnt if args[0].out_dir.name == name) for name in ("sim_run", "finetune")}


def stop_lines(capsys) -> list[str]:
    return [line for line in capsys.readouterr().out.splitlines() if line.startswith("sim2real: stopped")]


@pytest.mark.parametrize("where", [*sim2real.STAGES, "train-evaluation"])
def test_ctrl_c_in_a_stage_then_the_same_command_ends_as_an_uninterrupted_run(where, patch, config, reference,
                                                                              tmp_path, capsys):
    """``where``: a stage, or the sim run's held-out evaluation (its training finished)."""
    (reference, chunks, learnt), out, stage = reference, tmp_path / "run", where.split("-")[0]
    with pytest.MonkeyPatch.context() as once:
        interrupt_at(where, signal.SIGINT, once.setattr)
        capsys.readouterr()
        assert route(config, out) == sim2real.STOPPED
    [line] = stop_lines(capsys)
    assert f"stage {STAGE_NUMBER[stage]} of 5, {stage} " in line and line.endswith(f"continue with: {COMMAND}")
    assert not (out / "results.json").exists()
    with pytest.MonkeyPatch.context() as spy:
        recorded, fitted, trained = (counting(spy, sim2real, name)
                                     for name in ("record_exploration", "fit_traces", "train_and_evaluate"))
        relearnt = counting(spy, training, "learn")
        assert route(config, out) == 0
    assert figures(out) == figures(reference)
    assert (out / "traces.jsonl").read_bytes() == (reference / "traces.jsonl").read_bytes()
    # the finished stages are not redone; a recording goes on after its last complete episode (the 4th of chunk 2)
    episodes = figures(out)["sim2real"]["record"]["episodes"]
    assert len(recorded) == (chunks - 2 if stage == "record" else 0)
    assert sum(args[2] for args in recorded) == (episodes - 20 if stage == "record" else 0)
    assert len(fitted) == (stage in ("record", "fit"))
    assert len(trained) == {"record": 2, "fit": 2, "train": 2, "finetune": 1}.get(stage, 0)
    # a training goes on from its checkpoint, where Ctrl-C stopped it (the batch or episode it came in finishes):
    # the sim run's after its first batch (or all: then it only evaluates), the fine-tune's after 4 episodes
    sim_run, finetune = learnt["sim_run"], learnt["finetune"]
    assert trainings(relearnt) == {"sim_run": {"record": sim_run, "fit": sim_run, "train": sim_run - 1}.get(where, 0),
                                   "finetune": {"finetune": finetune - 4, "evaluate": 0}.get(where, finetune)}
    if stage == "record":
        assert "the recording's first 20 episodes" in line
    if stage in ("train", "finetune"):
        assert f"the checkpoint in {out / ('sim_run' if stage == 'train' else 'finetune')}" in line


@pytest.mark.parametrize("stage", sim2real.STAGES)
def test_a_run_killed_in_a_stage_continues_with_the_same_command(stage, patch, config, reference, tmp_path):
    """SIGKILL in each stage (train_qmix.py in a subprocess): the recording halfway through its third
    chunk, the fit, the sim run's first batch, the fine-tune's fourth episode, the evaluation. A
    rerun keeps the stages before, continues the killed one (the recording after its last complete
    episode, the fine-tune from its checkpoint after every episode; the sim run had none yet) and
    equals the uninterrupted run."""
    out = tmp_path / "run"
    argv = ["--config", str(config), "--sim2real", "--real-calls", str(BUDGET), "--finetune-calls", str(FINETUNE),
            "--out", str(out), "--episodes", str(EPISODES), "--no-progress", *SMALL]
    script = Path(__file__).with_name("sim2real_fault_run.py")
    killed = subprocess.run([sys.executable, str(script), stage, "SIGKILL", "--", *argv], capture_output=True,
                            text=True, timeout=300)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    with pytest.MonkeyPatch.context() as spy:
        learnt = counting(spy, training, "learn")
        assert route(config, out) == 0
    sim_run, finetune = reference[2]["sim_run"], reference[2]["finetune"]
    assert trainings(learnt) == {"record": {"sim_run": sim_run, "finetune": finetune},
                                 "fit": {"sim_run": sim_run, "finetune": finetune},
                                 "train": {"sim_run": sim_run, "finetune": finetune},
                                 "finetune": {"sim_run": 0, "finetune": finetune - 3},
                                 "evaluate": {"sim_run": 0, "finetune": 0}}[stage]
    assert figures(out) == figures(reference[0])
    assert (out / "traces.jsonl").read_bytes() == (reference[0] / "traces.jsonl").read_bytes()


def test_a_rerun_of_a_finished_run_redoes_nothing(patch, config, reference, tmp_path, capsys):
    out = tmp_path / "run"
    shutil.copytree(reference[0], out)
    before = (out / "results.json").read_text()
    with pytest.MonkeyPatch.context() as spy:
        for name in ("record_exploration", "fit_traces", "train_and_evaluate", "held_out_comparison"):
            spy.setattr(sim2real, name, lambda *a, **k: pytest.fail("a finished stage ran again"))
        capsys.readouterr()
        assert route(config, out) == 0
    assert (out / "results.json").read_text() == before and "predicted" in capsys.readouterr().out


def test_a_rerun_with_other_inputs_moves_the_earlier_results_aside(patch, config, reference, tmp_path, capsys):
    """Other --episodes: the recording and the fit are kept; the earlier results.json and sim run are
    moved into DIR/earlier/<time>/ before the training starts, neither lost nor looking current."""
    out = tmp_path / "run"
    shutil.copytree(reference[0], out)
    before = (out / "results.json").read_text()

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt
    with pytest.MonkeyPatch.context() as spy:
        recorded = counting(spy, sim2real, "record_exploration")
        spy.setattr(sim2real, "train_and_evaluate", interrupted)
        capsys.readouterr()
        assert route(config, out, sim_episodes=32) == sim2real.STOPPED
    [line] = stop_lines(capsys)
    assert "stage 3 of 5, train " in line and "the finished record and fit stages" in line
    assert not recorded and (out / "traces.jsonl").is_file() and (out / "fitted.yaml").is_file()
    assert not (out / "results.json").exists() and not (out / "sim_run" / "results.json").exists()
    [aside] = (out / "earlier").iterdir()
    assert (aside / "results.json").read_text() == before and (aside / "sim_run" / "results.json").is_file()


def test_out_naming_a_file_is_one_line(config, tmp_path, capsys):
    (tmp_path / "file").write_text("x")
    argv = ["--config", str(config), "--sim2real", "--real-calls", "600", "--out", str(tmp_path / "file")]
    with pytest.raises(SystemExit) as stop:
        train_qmix.run_main(lambda: train_qmix.main(argv), train_qmix.PROG)
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err.count("\n") == 1 and "--out" in err and "is a file" in err


@pytest.mark.parametrize("text, says", [('{"config": {"env": {', "not valid JSON"),
                                        ('{"config": {}, "eval": {}, "qmix_minus": {}}', "lacks ['sim2real']"),
                                        ("", "is empty")])
def test_show_on_a_damaged_results_json_is_one_line(text, says, tmp_path, capsys):
    (tmp_path / "results.json").write_text(text)
    with pytest.raises(SystemExit) as stop:
        sim2real.run_main(lambda: sim2real.show([str(tmp_path)]), sim2real.PROG)
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err.count("\n") == 1 and says in err and "results.json" in err


def test_a_fine_tune_share_over_the_budget_says_so(config, tmp_path):
    with pytest.raises(ConfigError) as err:
        route(config, tmp_path / "run", real_calls=100, finetune_calls=200)
    assert "--finetune-calls 200 is not below --real-calls 100" in str(err.value)
    assert "recording needs" not in str(err.value) and not (tmp_path / "run").exists()


def test_a_damaged_stage_record_is_one_line_and_spends_nothing(patch, config, tmp_path):
    """A stages.json that is not what a run wrote: no stage is redone on a guess (the recording's
    real calls would be spent again); one line says to delete it."""
    out = tmp_path / "run"
    out.mkdir()
    (out / "stages.json").write_text('{"stages": {"record": ')
    with pytest.MonkeyPatch.context() as spy:
        recorded = counting(spy, sim2real, "record_exploration")
        with pytest.raises(ConfigError) as err:
            route(config, out)
    assert "stages.json" in str(err.value) and "delete it" in str(err.value) and not recorded


def test_record_exploration_resumes_from_an_episodes_generator_state(tmp_path):
    """The hook the recording resumes by: a call given the state after episode 2 plays episodes 3-6
    of the uninterrupted call (topo_env.fitting.explore)."""
    import topo_env
    from topo_env.fitting.explore import record_exploration
    states = []
    whole = record_exploration(topo_env.parallel_env(profile="mmlu_pro"), tmp_path / "whole.jsonl", 6, seed=5, pool=4,
                               after_episode=states.append)
    rest = record_exploration(topo_env.parallel_env(profile="mmlu_pro"), tmp_path / "rest.jsonl", 4, seed=5, pool=4,
                              rng_state=states[1]["rng"])
    lines = (tmp_path / "whole.jsonl").read_text().splitlines()
    assert len(lines) == 6 and (tmp_path / "rest.jsonl").read_text().splitlines() == lines[2:]
    assert [s["episodes"] for s in states] == [1, 2, 3, 4, 5, 6] and states[-1]["calls"] == whole["calls"]
    assert rest["calls"] == whole["calls"] - states[1]["calls"]
    assert json.loads(json.dumps(states[1]["rng"])) == states[1]["rng"]  # what stages.json keeps
