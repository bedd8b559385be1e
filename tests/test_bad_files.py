"""Every file a user hands in, truncated, empty or garbage, stops its command with one line on stderr
(``<prog>: error: ...``, status 2, no traceback) naming the file; a damaged checkpoint is left as it
was. The matrix: each kind of file x (truncated, empty, garbage), through the command that reads it."""
from __future__ import annotations

import json
import random

import pytest
import torch

import train_qmix
from agents_llm.cache import ResponseCache
from fake_openai_server import FakeOpenAIServer
from run_checks import ONE_EPISODE_CONFIG, train_tiny_run
from studies import leaderboard, robustness
from topo_env import parallel_env
from topo_env.engine.cli import run_main
from topo_env.fitting import fit
from topo_env.sim.profiles import PROFILES, save_profile

torch.set_num_threads(1)
DAMAGES = ("truncated", "empty", "garbage")
GARBAGE = random.Random(0).randbytes(4096)  # not UTF-8, not a pickle, not a zip
CHEAP = ["--no-progress", "--no-pictures", "--episodes", "1", "--set", "train.references=false",
         "--set", "train.eval_episodes=1"]  # should a bad file be taken, the run is short and the test fails
TASKS = [{"id": f"q{i}", "domain": "reasoning", "prompt": f"Question {i}?", "choices": ["a", "b", "c"],
          "reference": "A"} for i in range(8)]


def damaged(good: bytes, how: str, cut: int | None = None) -> bytes:
    """``good`` truncated (to ``cut`` bytes, default half of it, ending inside a line: a cut at a line's
    end leaves a shorter well-formed file), emptied, or replaced by garbage."""
    if how == "truncated":
        half = good[:cut or len(good) // 2]
        return half[:-2] if half.endswith(b"\n") else half
    return {"empty": b"", "garbage": GARBAGE}[how]


def one_line_error(capsys, command, prog: str, *words: str) -> str:
    """Run ``command`` (a main) through run_main: it must exit with status 2 and one stderr line
    ``<prog>: error: ...`` holding ``words``, with no traceback. Returns the line."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as stopped:
        run_main(command, prog)
    err = capsys.readouterr().err
    assert stopped.value.code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{prog}: error: ") and "Traceback" not in err, err
    for word in words:
        assert word in lines[0], (word, lines[0])
    return lines[0]


# -- checkpoints: --resume, --init-from, studies.robustness --checkpoint -------------------------------------


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    """The folder of a real train_qmix.py run of 4 episodes (under a second), with its checkpoint.pt."""
    return train_tiny_run(tmp_path_factory.mktemp("trained") / "run")


def incomplete(trained_run, how: str) -> bytes:
    """A checkpoint that loads but is not one: a list, or the real one without ``episode``."""
    if how == "a list":
        value = [1, 2]
    else:
        value = torch.load(trained_run / "checkpoint.pt", weights_only=False)
        del value["episode"]
    path = trained_run.parent / "incomplete.pt"
    torch.save(value, path)
    return path.read_bytes()


CHECKPOINT_COMMANDS = {
    "--resume": (train_qmix.PROG, lambda run, tmp: train_qmix.main(
        ["--resume", str(run), "--no-progress", "--no-pictures"])),
    "--init-from": (train_qmix.PROG, lambda run, tmp: train_qmix.main(
        ["--config", ONE_EPISODE_CONFIG, "--init-from", str(run), "--out", str(tmp / "new"), *CHEAP])),
    "robustness --checkpoint": (robustness.PROG, lambda run, tmp: robustness.main(
        ["--checkpoint", str(run / "checkpoint.pt"), "--episodes", "1", "--no-progress", "--no-plots",
         "--out", str(tmp / "robustness")])),
}


@pytest.mark.parametrize("how", [*DAMAGES, "a list", "without 'episode'"])
@pytest.mark.parametrize("command", CHECKPOINT_COMMANDS)
def test_a_damaged_checkpoint_is_one_line_and_stays_as_it_was(trained_run, tmp_path, capsys, command, how):
    run = tmp_path / "run"
    run.mkdir()
    good = (trained_run / "checkpoint.pt").read_bytes()
    bad = damaged(good, how) if how in DAMAGES else incomplete(trained_run, how)
    (run / "checkpoint.pt").write_bytes(bad)
    prog, main = CHECKPOINT_COMMANDS[command]
    line = one_line_error(capsys, lambda: main(run, tmp_path), prog, str(run / "checkpoint.pt"), "train the run again")
    assert ("not a readable checkpoint (truncated or damaged: " if how in DAMAGES else "not a ") in line
    if how == "without 'episode'":
        assert "lacks ['episode']" in line
    assert (run / "checkpoint.pt").read_bytes() == bad  # reading never changes the file
    assert [p.name for p in run.iterdir()] == ["checkpoint.pt"]


# -- the experiment config (--config of train_qmix.py, studies.robustness, studies.leaderboard) ---------------

CONFIG = "env:\n  profile: mmlu_pro\n  rounds: 2\nsim_scale:\n  batch: 0\ntrain:\n  references: false\n  episodes: 1\n"
CONFIG_CUT = CONFIG.index("episodes") + 4  # inside a key (a cut inside a value can be valid YAML: not detectable)
CONFIG_COMMANDS = {
    "train_qmix": (train_qmix.PROG, lambda path, tmp: train_qmix.main(
        ["--config", str(path), "--out", str(tmp / "run"), *CHEAP])),
    "robustness": (robustness.PROG, lambda path, tmp: robustness.main(
        ["--config", str(path), "--episodes", "1", "--policies", "solo", "--no-progress", "--no-plots",
         "--out", str(tmp / "robustness")])),
    "leaderboard": (leaderboard.PROG, lambda path, tmp: leaderboard.main(
        ["--config", str(path), "--profile", "mmlu_pro", "--methods", "solo", "--episodes", "1", "--no-progress",
         "--out", str(tmp / "leaderboard")])),
}


@pytest.mark.parametrize("how, words", [
    ("truncated", ["config file is not valid YAML at line 8", "configs/"]),
    ("empty", ["config file is empty"]),
    ("garbage", ["config file is not UTF-8 text"]),
    ("a list", ["config file holds a YAML list, not a mapping"]),
])
@pytest.mark.parametrize("command", CONFIG_COMMANDS)
def test_a_damaged_config_is_one_line(tmp_path, capsys, command, how, words):
    path = tmp_path / "config.yaml"
    path.write_bytes(b"- env\n- qmix\n" if how == "a list" else damaged(CONFIG.encode(), how, CONFIG_CUT))
    prog, main = CONFIG_COMMANDS[command]
    one_line_error(capsys, lambda: main(path, tmp_path), prog, str(path), *words)
    assert not (tmp_path / "run").exists()


# -- a simulated team's profile (env.profile) -----------------------------------------------------------------


@pytest.mark.parametrize("how, words", [
    ("truncated", ["profile file is truncated"]),
    ("empty", ["profile file is empty"]),
    ("garbage", ["profile file is not UTF-8 text"]),
])
def test_a_damaged_profile_is_one_line(tmp_path, capsys, how, words):
    good = tmp_path / "good.yaml"
    save_profile(PROFILES["mmlu_pro"], good)
    path = tmp_path / "team.yaml"
    path.write_bytes(damaged(good.read_bytes(), how))
    one_line_error(capsys, lambda: train_qmix.main(["--config", ONE_EPISODE_CONFIG, "--set", f"env.profile={path}",
                                                    "--out", str(tmp_path / "run"), *CHEAP]),
                   train_qmix.PROG, str(path), "topo_env.fitting.fit", *words)


# -- traces handed to the fit -----------------------------------------------------------------------------------


@pytest.mark.parametrize("how, words", [
    ("truncated", [":3: not JSON", "fix or drop that line"]),
    ("empty", ["no episodes", "env.record"]),
    ("garbage", [":1: not UTF-8 text", "fix or drop that line"]),
])
def test_damaged_traces_are_one_line_naming_the_line(tmp_path, capsys, how, words):
    good = tmp_path / "good.jsonl"
    env = parallel_env()
    env.record(good)
    for seed in range(4):
        env.reset(seed=seed)
        while env.agents:
            env.step({a: 1 for a in env.agents})
    env.close()
    text = good.read_bytes()
    assert text.count(b"\n") == 4
    path = tmp_path / "traces.jsonl"
    path.write_bytes(damaged(text, how, cut=text.index(b"\n", text.index(b"\n") + 1) + 20))  # 20 bytes into line 3
    one_line_error(capsys, lambda: fit.main([str(path), "--out", str(tmp_path / "fitted.yaml"), "--no-check"]),
                   fit.PROG, str(path), *words)
    assert not (tmp_path / "fitted.yaml").exists()


# -- an LLM team's task file (env.backend.dataset) and response cache (env.backend.cache_path) ------------------


def llm_run(tmp_path, dataset, cache, base_url="http://127.0.0.1:9/v1"):
    return lambda: train_qmix.main([
        "--config", ONE_EPISODE_CONFIG, "--out", str(tmp_path / "run"), *CHEAP,
        "--set", "env.backend.kind=llm", "--set", "env.domain=reasoning", "--set", f"env.backend.dataset={dataset}",
        "--set", "env.backend.model=m", "--set", f"env.backend.base_url={base_url}",
        "--set", f"env.backend.cache_path={cache}", "--set", "env.backend.backoff_s=0.01",
        "--set", "env.backend.train_size=3", "--set", "qmix.hidden_dim=16", "--set", "qmix.batch_size=2",
        "--set", "train.warmup_episodes=2"])


@pytest.mark.parametrize("how", DAMAGES)
def test_a_damaged_task_file_is_one_line_naming_the_line(tmp_path, capsys, how):
    text = "".join(json.dumps(t) + "\n" for t in TASKS).encode()
    path = tmp_path / "tasks.jsonl"
    path.write_bytes(damaged(text, how))
    last_line = len(path.read_bytes().splitlines())
    words = {"truncated": f":{last_line}: not JSON", "empty": "holds no reasoning tasks",
             "garbage": ":1: not UTF-8 text"}[how]
    one_line_error(capsys, llm_run(tmp_path, path, "null"), train_qmix.PROG, str(path), "schema in agents_llm.tasks",
                   words)


@pytest.mark.parametrize("how, words", [
    ("truncated", ["database disk image is malformed"]),
    ("garbage", ["file is not a database"]),
])
def test_a_damaged_response_cache_is_one_line(tmp_path, capsys, how, words):
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps(t) + "\n" for t in TASKS))
    good = ResponseCache(tmp_path / "good.sqlite")
    for k in range(300):
        good.put(f"key{k}", {"text": "x" * 200})
    good.close()
    cache = tmp_path / "cache.sqlite"
    cache.write_bytes(damaged((tmp_path / "good.sqlite").read_bytes(), how))
    with FakeOpenAIServer() as server:
        one_line_error(capsys, llm_run(tmp_path, tasks, cache, server.base_url), train_qmix.PROG, str(cache),
                       "LLM response cache is not a readable sqlite database", "env.backend.cache_path", *words)


def test_an_empty_response_cache_is_a_fresh_one(tmp_path):
    path = tmp_path / "cache.sqlite"
    path.write_bytes(b"")
    cache = ResponseCache(path)
    assert cache.get("k") is None
    cache.put("k", {"text": "x"})
    assert cache.get("k") == {"text": "x"} and len(cache) == 1
    cache.close()
