"""The command-line seams: nested ``--set`` keys, the backend registry and its config section,
one-line errors (the programs run as subprocesses; stderr is read), and the closing notes."""
from __future__ import annotations

import argparse
import dataclasses
import json
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

import topo_env
from learners.config import load_experiment
from topo_env.engine import backend_registry as backends
from topo_env.engine.backend_registry import backend_kinds, make_backend, register_backend
from agents_llm.config import LLMBackendConfig
from topo_env.sim.config import SimBackendConfig
from topo_env.sim.profiles import get_profile
from topo_env.engine.cli import (apply_set, closing_note, format_table, parse_set, points, positive_int,
                          standard_error_note)
from topo_env.frontends.env_config import EnvConfig, env_difference
from topo_env.engine.config_checks import ConfigError
from topo_env.sim.team import SimTeamBackend

REPO_ROOT = Path(__file__).resolve().parents[1]
SECRET = "sk-cli-secret-do-not-leak"
SAMPLE_TASKS = "configs/data/mmlu_pro_sample.jsonl"


def run_program(*argv: str, timeout: int = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *argv], capture_output=True, text=True, cwd=REPO_ROOT, timeout=timeout)


def assert_one_line_error(proc: subprocess.CompletedProcess, prog: str, *words: str) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"{prog}: error: ") and "Traceback" not in proc.stderr
    for word in words:
        assert word in lines[0], (word, lines[0])
    return lines[0]


def free_port() -> int:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return port


def llm_backend(**keys) -> dict:
    return {"kind": "llm", "model": "m", "dataset": SAMPLE_TASKS, **keys}


# -- --set ----------------------------------------------------------------------------------------


def test_parse_set_reads_nested_keys_and_yaml_scalars():
    assert parse_set("learner.lr=1e-3", ("learner",)) == (("learner", "lr"), 0.001)
    assert parse_set("env.backend.base_url=http://127.0.0.1:8080/v1", ("env",)) == (
        ("env", "backend", "base_url"), "http://127.0.0.1:8080/v1")
    assert parse_set("env.backend={kind: sim}", ("env",)) == (("env", "backend"), {"kind": "sim"})
    assert parse_set("train.save_buffer=false", ("train",)) == (("train", "save_buffer"), False)


@pytest.mark.parametrize("text, words", [
    ("learner.lr", ["expected section.key=value"]),
    ("lr=1", ["section.key[.subkey]"]),
    ("env..model=1", ["section.key[.subkey]"]),
    ("nope.x=1", ["unknown section 'nope'"]),
])
def test_parse_set_errors_name_the_key(text, words):
    with pytest.raises(ConfigError) as err:
        parse_set(text, ("env", "learner", "train"))
    for word in words:
        assert word in str(err.value)


def test_set_errors_never_show_the_value():
    with pytest.raises(ConfigError) as err:
        parse_set(f"nope.backend.api_key={SECRET}", ("env",))
    assert SECRET not in str(err.value)


def test_apply_set_expands_a_kind_shorthand_and_refuses_a_scalar_on_the_way():
    data = {"env": {"backend": "llm", "rounds": 2}}
    apply_set(data, ("env", "backend", "model"), "m")
    assert data == {"env": {"backend": {"kind": "llm", "model": "m"}, "rounds": 2}}
    fresh: dict = {}
    apply_set(fresh, ("env", "backend", "kind"), "sim")
    assert fresh == {"env": {"backend": {"kind": "sim"}}}
    with pytest.raises(ConfigError, match="env.rounds is 2, not a mapping"):
        apply_set(data, ("env", "rounds", "x"), 1)


def test_nested_set_builds_an_llm_backend_over_the_sim_default():
    cfg = load_experiment(REPO_ROOT / "configs" / "default.yaml", [
        "env.backend.kind=llm", "env.backend.model=m", f"env.backend.dataset={SAMPLE_TASKS}", "env.domain=reasoning",
        "env.backend.base_url=http://127.0.0.1:9999/v1", "env.backend.max_tokens=64"])
    assert cfg.env.backend == LLMBackendConfig(model="m", dataset=SAMPLE_TASKS, base_url="http://127.0.0.1:9999/v1",
                                               max_tokens=64)
    local = load_experiment(REPO_ROOT / "configs" / "local_llm.yaml", ["env.backend.base_url=http://10.0.0.1:1/v1"])
    assert local.env.backend.base_url == "http://10.0.0.1:1/v1" and local.env.backend.model == "smollm2"
    assert local.env.backend.train_size == 3  # the other keys of the file stay


# -- the backend section and the registry -------------------------------------------------------


def test_backend_section_forms():
    assert EnvConfig().backend == SimBackendConfig() == EnvConfig.from_dict({"backend": {"kind": "sim"}}).backend
    cfg = EnvConfig.from_dict({"domain": "reasoning", "backend": llm_backend(api_key=SECRET, temperature=0)})
    assert isinstance(cfg.backend, LLMBackendConfig) and cfg.backend.temperature == 0.0
    assert EnvConfig(domain="reasoning", backend=cfg.backend) == cfg  # a built config is taken as it is
    assert backend_kinds() == ("llm", "sim")


def test_the_api_key_is_never_written_out():
    cfg = EnvConfig.from_dict({"domain": "reasoning", "backend": llm_backend(api_key=SECRET)})
    other = dataclasses.replace(cfg, backend=dataclasses.replace(cfg.backend, api_key="sk-other", model="n"))
    written = json.dumps(cfg.to_dict()) + repr(cfg) + str(env_difference(cfg, other))
    assert SECRET not in written and "sk-other" not in written
    assert list(cfg.to_dict()["backend"])[0] == "kind"
    assert env_difference(cfg, other) == "env.backend: " + repr(cfg.to_dict()["backend"]) + " against " + repr(
        other.to_dict()["backend"])
    with pytest.raises(ConfigError) as err:
        EnvConfig.from_dict({"domain": "reasoning", "backend": llm_backend(api_key=SECRET, bogus=1)})
    assert SECRET not in str(err.value)


def test_the_env_keys_of_0_1_are_unknown_and_the_error_names_their_place_now():
    old_llm = {"backend": "llm", "domain": "reasoning", "llm": {"model": "m", "base_url": "http://h/v1"},
               "dataset": SAMPLE_TASKS, "train_size": 3}
    with pytest.raises(ConfigError) as err:
        EnvConfig.from_dict(old_llm)
    message = str(err.value)
    assert "\n" not in message and message.startswith("unknown env config key(s) ['dataset', 'llm', 'train_size']")
    for now in ("'llm' is now env.backend.model", "'dataset' is now env.backend.dataset",
                "'train_size' is now env.backend.train_size"):
        assert now in message
    with pytest.raises(ConfigError) as err:
        EnvConfig.from_dict({"foo": 1})
    assert "env.backend" not in str(err.value).split("; known keys")[0]


def test_make_backend_builds_each_kind_and_both_draw_tasks_by_index():
    sim = make_backend(EnvConfig.from_dict({"profile": "aime25"}))
    assert isinstance(sim, SimTeamBackend) and sim.task_at("eval", 7) == sim.tasks.task("eval", 7)
    assert sim.task_at("eval", 7).id == "aime25-eval-7"
    llm = make_backend(EnvConfig.from_dict({"domain": "reasoning", "backend": llm_backend(train_size=2)}))
    assert llm.client.config.model == "m"
    train = [llm.task_at("train", i).id for i in range(2)]
    assert len(set(train)) == 2 and llm.task_at("train", 2).id == train[0]  # wraps around the split
    assert {t.id for t in llm.tasks.splits["eval"]}.isdisjoint(train)
    rng = np.random.default_rng(0)
    assert llm.sample_task(rng, "eval").id in {t.id for t in llm.tasks.splits["eval"]}


@dataclass(frozen=True)
class EchoBackendConfig:
    kind: str = "echo"
    profile: str = "humaneval"

    @property
    def domain(self) -> str:  # optional: the domain a team of this kind solves when env.domain is left out
        return get_profile(self.profile).domain

    def check(self, env: EnvConfig) -> None:
        if env.n_agents > 4:
            raise ConfigError(f"backend kind 'echo' serves at most 4 agents, n_agents={env.n_agents}")


def test_a_registered_backend_is_built_from_its_section(monkeypatch):
    monkeypatch.setattr(backends, "_REGISTRY", dict(backends._REGISTRY))  # this test's registrations go away
    seen = []

    def factory(config: EnvConfig) -> SimTeamBackend:
        seen.append(config)
        return SimTeamBackend.from_config(dataclasses.replace(config, backend=SimBackendConfig(profile=config.backend.profile)))

    register_backend("echo", factory, EchoBackendConfig)
    env = topo_env.parallel_env(backend={"kind": "echo", "profile": "aime25"}, rounds=1)
    assert seen[0].backend == EchoBackendConfig(profile="aime25") and env.backend.profile.name == "aime25"
    assert "echo" in backend_kinds()
    with pytest.raises(ConfigError, match="serves at most 4 agents, n_agents=5"):
        EnvConfig.from_dict({"backend": "echo", "n_agents": 5})
    with pytest.raises(ValueError, match="already registered"):
        register_backend("echo", factory, EchoBackendConfig)
    # a factory given by name is imported on first use
    register_backend("echo", "topo_env.sim.team:SimTeamBackend.from_config", EchoBackendConfig, replace=True)
    assert isinstance(make_backend(EnvConfig(backend="echo")), SimTeamBackend)


@pytest.mark.parametrize("kind, factory, config_cls, words", [
    ("two words", "m:f", EchoBackendConfig, "identifier"),
    ("echo", "m:f", dict, "must be a dataclass"),
    ("other", "m:f", EchoBackendConfig, "kind: str = 'other'"),
    ("echo", "no_colon", EchoBackendConfig, "package.module:name"),
])
def test_register_backend_refuses_bad_registrations(kind, factory, config_cls, words, monkeypatch):
    monkeypatch.setattr(backends, "_REGISTRY", dict(backends._REGISTRY))
    with pytest.raises(ValueError, match=words.replace("[", r"\[").replace(".", r"\.")):
        register_backend(kind, factory, config_cls)


def test_llm_backend_config_imports_no_llm_stack():
    code = ("import sys, topo_env\n"
            "from topo_env.frontends.env_config import EnvConfig\n"
            f"cfg = EnvConfig.from_dict({{'domain': 'reasoning', 'backend': {llm_backend()!r}}})\n"
            "roots = ('openai', 'agents_llm', 'torch', 'datasets')\n"
            "light = ('agents_llm', 'agents_llm.config')  # the LLM backend's config dataclass\n"
            "heavy = sorted(m for m in sys.modules if m.split('.')[0] in roots and m not in light)\n"
            "print(heavy)")
    proc = run_program("-c", code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


# -- one-line errors from the programs -------------------------------------------------------------


def test_train_qmix_config_error_is_one_line(tmp_path):
    out = tmp_path / "never"
    proc = run_program("train_qmix.py", "--set", "qmix.lr=-1", "--out", str(out), "--no-progress")
    assert_one_line_error(proc, "python train_qmix.py", "qmix.lr=-1")
    old = run_program("train_qmix.py", "--set", "learner.lr=-1", "--out", str(out), "--no-progress")
    assert_one_line_error(old, "python train_qmix.py", "qmix.lr=-1")  # an old key: its error, no note
    assert not out.exists()


def test_train_qmix_old_llm_key_is_unknown_and_named_where_it_lives_now(tmp_path):
    proc = run_program("train_qmix.py", "--set", "env.llm={model: m}", "--out", str(tmp_path / "x"))
    assert_one_line_error(proc, "python train_qmix.py", "unknown env config key(s) ['llm']",
                          "'llm' is now env.backend.model")


def test_train_qmix_missing_config_file_is_one_line(tmp_path):
    proc = run_program("train_qmix.py", "--config", "configs/nope.yaml", "--out", str(tmp_path / "never"))
    assert_one_line_error(proc, "python train_qmix.py", "'configs/nope.yaml' does not exist", "configs/")
    assert not (tmp_path / "never").exists()


def test_train_qmix_bad_argument_is_one_line():
    proc = run_program("train_qmix.py", "--episodes", "zero")
    assert_one_line_error(proc, "python train_qmix.py", "--episodes", "'zero'")


@pytest.mark.parametrize("where", ["missing", "empty"])
def test_train_qmix_resume_of_a_missing_run_is_one_line(tmp_path, where):
    run_dir = tmp_path / "run"
    if where == "empty":
        run_dir.mkdir()
    proc = run_program("train_qmix.py", "--resume", str(run_dir))
    line = assert_one_line_error(proc, "python train_qmix.py", str(run_dir), "--out directory")
    assert ("has no checkpoint.pt" if where == "empty" else "does not exist") in line


def test_train_qmix_without_a_local_server_names_the_command_that_starts_one(tmp_path):
    port = free_port()
    proc = run_program("train_qmix.py", "--config", "configs/local_llm.yaml", "--no-progress", "--no-pictures",
                       "--out", str(tmp_path / "run"), "--set", f"env.backend.base_url=http://127.0.0.1:{port}/v1",
                       "--set", "env.backend.cache_path=null", "--set", "env.backend.backoff_s=5")
    assert_one_line_error(proc, "python train_qmix.py", f"http://127.0.0.1:{port}/v1",
                          f"python -m agents_llm.local_server --port {port}")
    assert not (tmp_path / "run" / "checkpoint.pt").exists()


def test_train_qmix_help_says_where_every_key_is_documented():
    proc = run_program("train_qmix.py", "--help")
    assert proc.returncode == 0
    for where in ("topo_env/frontends/env_config.py", "EnvConfig", "topo_env/engine/backend_registry.py", "learners/config.py", "QMIXConfig", "ExplorationConfig", "SimScaleConfig", "RuntimeConfig",
                  "TrainConfig", "env.backend.base_url="):
        assert where in proc.stdout, where


@pytest.mark.parametrize("argv, words", [
    (["--checkpoint", "/nonexistent/run"], ["/nonexistent/run", "not found"]),
    (["--backend", "llm"], ["needs backend.dataset, backend.model"]),
    (["--set", "env.backend.kind=gpt"], ["backend.kind='gpt'", "known kinds"]),
    (["--episodes", "-3"], ["--episodes", "'-3'"]),
])
def test_robustness_errors_are_one_line(argv, words, tmp_path):
    proc = run_program("-m", "studies.robustness", *argv, "--no-progress", "--out", str(tmp_path / "never"))
    assert_one_line_error(proc, "python -m studies.robustness", *words)
    assert not (tmp_path / "never").exists()


def test_robustness_without_a_server_names_it(tmp_path):
    port = free_port()
    config = tmp_path / "llm.yaml"
    config.write_text(json.dumps({"env": {"domain": "reasoning", "backend": llm_backend(
        base_url=f"http://127.0.0.1:{port}/v1", cache_path=None, train_size=2)}}))
    proc = run_program("-m", "studies.robustness", "--config", str(config), "--policies", "solo", "--episodes", "1",
                       "--no-progress", "--no-plots", "--out", str(tmp_path / "out"))
    assert_one_line_error(proc, "python -m studies.robustness", f"--port {port}")


def test_baselines_cli_errors_are_one_line():
    proc = run_program("-m", "topo_env.references.baselines_cli", "--policy", "chain", "--profile", "mmlu_pro",
                       "--episodes", "2", "--adversarial", "9")
    assert_one_line_error(proc, "python -m topo_env.references.baselines_cli", "adversarial_agents contains 9")
    proc = run_program("-m", "topo_env.references.baselines_cli", "--policy", "ring")
    assert_one_line_error(proc, "python -m topo_env.references.baselines_cli", "ring")


# -- tables and closing notes ----------------------------------------------------------------------


def test_table_and_note_helpers():
    table = format_table([{"policy": "chain", "reward": 0.5, "n": 3}, {"policy": "full", "reward": float("nan")}],
                         ("policy", "reward", "n"))
    assert table.splitlines() == ["policy  reward  n", "------  ------  -", "chain   0.5000  3", "full    nan      "]
    assert points(0.45678) == "45.68" and points(1.0) == "100.00"
    note = closing_note("config c.yaml on mmlu_pro", ["higher is better"], [("results", Path("r/results.json"))])
    assert note.splitlines() == ["Scored: config c.yaml on mmlu_pro.", "higher is better", "Wrote:",
                                 "  results: r/results.json"]
    assert "paired standard error" in standard_error_note("drop (pts)")
    assert positive_int("3") == 3
    for bad in ("0", "x", "-1"):
        with pytest.raises(argparse.ArgumentTypeError, match=repr(bad)):
            positive_int(bad)


def test_baselines_cli_table_shows_accuracy_in_points():
    proc = run_program("-m", "topo_env.references.baselines_cli", "--policy", "chain", "--profile", "mmlu_pro",
                       "--episodes", "4", "--no-progress")
    assert proc.returncode == 0, proc.stderr
    header, _, row = proc.stdout.splitlines()[:3]
    assert "accuracy (pts)" in header
    accuracy = float(row.split()[3])
    assert accuracy in (0.0, 25.0, 50.0, 75.0, 100.0)  # four episodes, each right or wrong


def test_robustness_closing_note_says_what_it_scored_and_wrote(tmp_path):
    out = tmp_path / "robust"
    proc = run_program("-m", "studies.robustness", "--adversary-position", "2", "--episodes", "4", "--policies", "chain",
                       "--no-progress", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    assert "Scored: config" in text and "default.yaml on mmlu_pro" in text
    assert "higher is better" in text and "paired standard error" in text
    assert f"{out / 'robustness.json'}" in text and f"{out / 'robustness.png'}" in text
