"""A training run interrupted in each of its stages (teacher, TD training, validation, held-out
evaluation) by Ctrl-C (SIGINT) or a kill (SIGKILL): a Ctrl-C prints one line saying where it
stopped and the command that continues, exit 130, no traceback; that command (a resumed run, or
the same command again where nothing was saved) ends with exactly the uninterrupted run's
results and networks. Also: --resume with fewer episodes than trained, and --out naming a file,
are one line and leave the checkpoint as it was."""
from __future__ import annotations

import json
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import train_qmix
from interrupted_run import interrupt_at
from topo_env.engine.cli import run_main

# costly module fixtures: pytest-xdist (--dist loadgroup, pyproject.toml) builds them once, on one worker
pytestmark = pytest.mark.xdist_group("test_interruptions")

torch.set_num_threads(1)
TESTS = Path(__file__).resolve().parent
TINY = ["--episodes", "64", "--no-progress", "--no-pictures", "--set", "runtime.torch_threads=1",
        "--set", "sim_scale.teacher_episodes=256", "--set", "sim_scale.teacher_epochs=2",
        "--set", "env.embed_dim=32", "--set", "qmix.hidden_dim=16", "--set", "sim_scale.batch=16",
        "--set", "sim_scale.noise_samples=2", "--set", "qmix.batch_size=16", "--set", "qmix.episodes_per_update=8",
        "--set", "train.validate_every=32", "--set", "train.validate_episodes=50", "--set", "train.eval_episodes=100",
        "--set", "train.curve_every=0", "--set", "train.checkpoint_every=16", "--set", "train.log_every=32",
        "--set", "train.references=false", "--set", "qmix.mixer_warmup=0", "--set", "train.warmup_episodes=16"]
"""A 64-episode batched run (batches of 16) with a teacher: checkpoints every 16 episodes,
validation every 32 (and the student's at 0), log windows of 32 (a checkpoint at 48 falls inside one);
updates from episode 16 on, the agent network's too, so that every validation check plays."""
TIMING = {"seconds", "time_split", "search_cached"}


@pytest.fixture(scope="module")
def straight(small_search_cache, tmp_path_factory):
    """The uninterrupted run."""
    out = tmp_path_factory.mktemp("straight")
    assert train_qmix.main(["--out", str(out), *TINY]) == 0
    return out


def without_timing(value):
    """``value`` (results.json's) without wall times and cache flags, which differ between runs."""
    if isinstance(value, dict):
        return {k: without_timing(v) for k, v in value.items() if k not in TIMING}
    if isinstance(value, list):
        return [without_timing(v) for v in value]
    return value


def assert_same_run(a: Path, b: Path) -> None:
    """Runs ``a`` and ``b`` ended with the same results.json (but timings) and networks."""
    ra, rb = (json.loads((d / "results.json").read_text()) for d in (a, b))
    assert without_timing(ra) == without_timing(rb)
    ca, cb = (torch.load(d / "checkpoint.pt", weights_only=False) for d in (a, b))
    assert ca["episode"] == cb["episode"] == 64
    for part in ("agent", "mixer", "target_agent", "target_mixer"):
        for name, tensor in ca["learner"][part].items():
            assert torch.equal(tensor, cb["learner"][part][name]), f"{part}.{name} differs"


def run_command(line: str) -> int:
    """Run a ``python train_qmix.py ...`` command line as the stop line gives it, in this process."""
    words = shlex.split(line)
    assert words[:2] == ["python", "train_qmix.py"], line
    return run_main(lambda: train_qmix.main(words[2:]), train_qmix.PROG)


STOP_WORDS = {"teacher": "the teacher stage", "training": "training", "validation": "training",
              "evaluation": "the held-out evaluation"}


@pytest.mark.parametrize("stage", ["teacher", "training", "validation", "evaluation"])
def test_ctrl_c_in_each_stage_says_how_to_go_on_and_going_on_ends_as_the_straight_run(
        stage, straight, tmp_path, monkeypatch, capsys):
    out = tmp_path / "run"
    interrupt_at(stage, signal.SIGINT, monkeypatch.setattr)
    argv = ["--out", str(out), *TINY]
    assert run_main(lambda: train_qmix.main(argv), train_qmix.PROG) == 130
    monkeypatch.undo()
    printed = capsys.readouterr()
    assert "Traceback" not in printed.err + printed.out
    stops = [line for line in printed.out.splitlines() if line.startswith("stopped in")]
    assert len(stops) == 1 and stops[0].startswith(f"stopped in {STOP_WORDS[stage]}:"), printed.out
    kept, command = stops[0].split("; ")[-2:]
    if stage == "teacher":  # nothing saved: the same command again
        assert not (out / "checkpoint.pt").exists() and "nothing was saved" in stops[0]
        assert command == f"start again with: python train_qmix.py {shlex.join(argv)}"
    else:  # a checkpoint: --resume
        episode = torch.load(out / "checkpoint.pt", weights_only=False)["episode"]
        assert f"checkpoint at episode {episode} in {out}" in stops[0]
        assert episode == {"training": 48, "validation": 32, "evaluation": 64}[stage]
        assert command == f"continue with: python train_qmix.py --resume {out}"
    assert run_command(command.split(": ", 1)[1]) == 0
    assert_same_run(straight, out)


@pytest.mark.parametrize("stage", ["teacher", "training", "validation", "evaluation"])
def test_a_kill_in_a_stage_then_resuming_or_rerunning_ends_as_the_straight_run(stage, straight, small_search_cache,
                                                                             tmp_path):
    out = tmp_path / "run"
    argv = ["--out", str(out), *TINY]
    killed = subprocess.run([sys.executable, str(TESTS / "interrupted_run.py"), stage, "SIGKILL", "--", *argv],
                            cwd=TESTS.parent, capture_output=True, text=True, timeout=300)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    saved = (out / "checkpoint.pt").exists()
    assert saved == (stage != "teacher")
    assert not list(out.glob("*.tmp"))
    assert train_qmix.main(["--resume", str(out)] if saved else argv) == 0
    if not saved:  # the killed run's files were moved aside, not mixed with the new run's
        assert len(list((out / "earlier").iterdir())) == 1
    assert_same_run(straight, out)


def test_a_resumed_run_counts_the_time_of_every_part(straight, tmp_path, monkeypatch):
    out = tmp_path / "run"
    interrupt_at("training", signal.SIGINT, monkeypatch.setattr)
    assert train_qmix.main(["--out", str(out), *TINY]) == 130
    monkeypatch.undo()
    before = torch.load(out / "checkpoint.pt", weights_only=False)["seconds"]
    assert before > 0
    assert train_qmix.main(["--resume", str(out), "--no-progress", "--no-pictures"]) == 0
    assert json.loads((out / "results.json").read_text())["train"]["seconds"] > before


def test_resuming_with_fewer_episodes_than_trained_is_refused_and_changes_nothing(straight, tmp_path, capsys):
    checkpoint = straight / "checkpoint.pt"
    before = checkpoint.read_bytes()
    with pytest.raises(SystemExit) as refused:
        run_main(lambda: train_qmix.main(["--resume", str(straight), "--episodes", "32"]), train_qmix.PROG)
    assert refused.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "trained 64 episodes already" in err and "--episodes 64 or more" in err
    assert checkpoint.read_bytes() == before


@pytest.mark.parametrize("where", ["file", "under_a_file"])
def test_an_out_that_is_a_file_is_one_line(where, tmp_path, capsys):
    taken = tmp_path / "taken"
    taken.write_text("a user's file")
    out = taken if where == "file" else taken / "run"
    with pytest.raises(SystemExit) as refused:
        run_main(lambda: train_qmix.main(["--out", str(out), *TINY]), train_qmix.PROG)
    assert refused.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"--out '{out}'" in err and "Traceback" not in err
    assert taken.read_text() == "a user's file"


def test_ctrl_c_while_the_program_starts_is_one_line(tmp_path):
    """SIGINT half a second in, while train_qmix.py loads its libraries: one line, exit 130, nothing written."""
    out = tmp_path / "run"
    started = subprocess.Popen([sys.executable, "train_qmix.py", "--out", str(out), *TINY], cwd=TESTS.parent,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(0.5)
    started.send_signal(signal.SIGINT)
    stdout, stderr = started.communicate(timeout=120)
    assert started.returncode == 130, stderr[-2000:]
    lines = (stdout + stderr).strip().splitlines()
    assert len(lines) == 1 and "interrupted" in lines[0] and "Traceback" not in stderr, stdout + stderr
    assert not out.exists()
