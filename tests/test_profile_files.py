"""Profile YAML files: a saved profile loads back equal and runs in the env; a bad file is refused with
one line naming the file, the line and the field."""
import dataclasses

import pytest

import topo_env
from topo_env.frontends.env_config import EnvConfig
from topo_env.engine.config_checks import ConfigError
from topo_env.sim.profiles import PROFILES, ProfileFileError, get_profile, load_profile, save_profile

from test_cli import assert_one_line_error, run_program


@pytest.mark.parametrize("name", ["mmlu_pro_mixed", "humaneval"])
def test_a_saved_profile_loads_back_equal_and_runs(tmp_path, name):
    path = tmp_path / f"{name}.yaml"
    save_profile(PROFILES[name], path)
    loaded = get_profile(str(path))
    assert dataclasses.replace(loaded, source=None) == PROFILES[name]
    env = topo_env.parallel_env(profile=str(path))
    env.reset(seed=4)
    reference = topo_env.parallel_env(profile=name)
    reference.reset(seed=4)
    while env.agents:  # the same seed gives the same episode as the built-in profile
        _, reward, _, _, _ = env.step({a: 1 for a in env.agents})
        _, expected, _, _, _ = reference.step({a: 1 for a in reference.agents})
        assert reward == expected


def test_a_profile_file_may_give_only_some_fields(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("name: mine\ndomain: reasoning\nsubjects:\n  - {name: law, weight: 1, offset: -0.5, verifiability: -0.8}\n"
                    "  - {name: math, weight: 2, offset: 0.3, verifiability: 0.9}\nteam:\n  - qwen3-32b\n"
                    "  - {name: tuned, ability: 0.2, skills: {law: 0.4}}\nalpha: 1.5\n")
    p = load_profile(path)
    assert p.subject_names == ("law", "math") and p.alpha == 1.5 and p.w_commit == PROFILES["mmlu_pro"].w_commit
    assert p.team_models(2)[1].skill("law") == pytest.approx(0.6)
    assert EnvConfig.from_dict({"profile": str(path)}).resolved_domain == "reasoning"


@pytest.mark.parametrize("text,line,field,words", [
    ("name: x\ndomain: reasoning\nsubjects: [{name: a, weight: 1, offset: 0, verifiability: 0}]\nalpah: 2\n",
     4, "alpah", "unknown field"),
    ("name: x\ndomain: reasoning\nsubjects: [{name: a, weight: 1, offset: 0, verifiability: 0}]\nalpha: high\n",
     4, "alpha", "finite number"),
    ("name: x\ndomain: poetry\nsubjects: [{name: a, weight: 1, offset: 0, verifiability: 0}]\n", 2, "domain", "poetry"),
    ("name: x\ndomain: reasoning\nsubjects: [{name: a, weight: 1, offset: 0}]\n", 3, "subjects", "verifiability"),
    ("name: x\ndomain: reasoning\nsubjects: [{name: a, weight: 1, offset: 0, verifiability: 0}]\nteam: [gpt-9]\n",
     4, "team", "gpt-9"),
])
def test_a_bad_profile_file_names_file_line_and_field(tmp_path, text, line, field, words):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ProfileFileError) as err:
        load_profile(path)
    message = str(err.value)
    assert str(path) in message and f"line {line}" in message and repr(field) in message and words in message
    with pytest.raises(ConfigError, match="bad.yaml"):
        EnvConfig.from_dict({"profile": str(path)})


def test_a_missing_or_bad_profile_stops_a_run_with_one_line(tmp_path):
    proc = run_program("train_qmix.py", "--set", f"env.profile={tmp_path / 'nope.yaml'}", "--out", str(tmp_path / "r"))
    assert_one_line_error(proc, "python train_qmix.py", "nope.yaml", "does not exist", "topo_env.fitting.fit")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\ndomain: reasoning\nsubjects: []\n")
    proc = run_program("train_qmix.py", "--set", f"env.profile={bad}", "--out", str(tmp_path / "r"))
    assert_one_line_error(proc, "python train_qmix.py", "bad.yaml", "line 3", "'subjects'")


def test_the_command_line_tools_take_a_profile_file(tmp_path, capsys):
    """The oracle and the calibration report run on a profile file as on a built-in profile."""
    import json

    from topo_env.references import oracle_cli as oracle
    from topo_env.sim import calibrate

    path = tmp_path / "team.yaml"
    save_profile(dataclasses.replace(PROFILES["mmlu_pro"], name="team"), path)
    args = ["--rounds", "1", "--samples", "200", "--rerank-samples", "400", "--eval-samples", "400", "--json",
            "--no-progress"]
    assert oracle.main(["--profile", str(path), *args]) == 0
    from_file = json.loads(capsys.readouterr().out)
    assert oracle.main(["--profile", "mmlu_pro", *args]) == 0
    built_in = json.loads(capsys.readouterr().out)
    assert from_file["fixed"] == built_in["fixed"]  # the same team: the same search on the same samples
    calibrate.main(["--profile", str(path), "--samples", "500"])
    assert str(path) in capsys.readouterr().out
