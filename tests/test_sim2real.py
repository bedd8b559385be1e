"""Issue 35, section 3: the sim-to-real route on a simulated real team it never reads.

The real team is a perturbed copy of mmlu_pro (experiments.fit_recovery.perturb, seed 100: the
agents' abilities and verbosities, the subjects' offsets, the verifiabilities permuted, conformity,
trap pull, confidence and tokens moved). ``train_qmix.py --sim2real`` records it within the budget,
fits a simulated team from the built-in profile, trains on that and scores the greedy policy on the
real team's held-out episodes. The full study (10,000 calls, seeds 0-2) is
``python -m experiments.sim2real_study``; this is its small version.
"""
from __future__ import annotations

import json

import pytest
import yaml

from studies import sim2real
import train_qmix
from experiments.fit_recovery import perturb
from topo_env.fitting.fit import write_profile

# costly module fixtures: pytest-xdist (--dist loadgroup, pyproject.toml) builds them once, on one worker
pytestmark = pytest.mark.xdist_group("test_sim2real")

BUDGET = 1500
SMALL = ["--sim-set", "sim_scale.teacher_episodes=0", "--sim-set", "train.validate_every=0",
         "--sim-set", "train.curve_every=0", "--sim-set", "train.eval_episodes=50", "--sim-set", "train.references=false",
         "--sim-set", "qmix.hidden_dim=16", "--sim-set", "sim_scale.batch=32", "--sim-set", "qmix.batch_size=16",
         "--sim-set", "qmix.episodes_per_update=8"]


@pytest.fixture(scope="module")
def route(tmp_path_factory):
    """One sim-to-real run on the perturbed team; returns (out dir, real profile path, the fit's inputs,
    the training runs' configs and output folders, as JSON text)."""
    tmp = tmp_path_factory.mktemp("s2r")
    _, truth = perturb("mmlu_pro", 100)
    real = tmp / "real.yaml"
    write_profile(truth, real)
    config = tmp / "real_team.yaml"
    config.write_text(yaml.safe_dump({"env": {"profile": str(real), "embed_dim": 64},
                                      "train": {"eval_episodes": 300, "references": False}}))
    fitted_from, trained = [], []
    fit, train, train_run = sim2real.fit_traces, train_qmix.main, sim2real.train_and_evaluate

    def spying_fit(traces, base, **kwargs):
        fitted_from.append((traces, base, kwargs["config"].backend.profile))
        return fit(traces, base, **kwargs)

    def spying_train(cfg, out_dir, options):
        trained.append(json.dumps({"config": cfg.to_dict(), "out": str(out_dir), "options": repr(options)}, default=str))
        return train_run(cfg, out_dir, options)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sim2real, "fit_traces", spying_fit)
        patch.setattr(sim2real, "train_and_evaluate", spying_train)
        out = tmp / "run"
        assert train(["--config", str(config), "--sim2real", "--real-calls", str(BUDGET), "--out", str(out),
                      "--episodes", "64", "--no-progress", *SMALL]) == 0
    return out, real, fitted_from, trained


def test_it_spends_at_most_its_budget_on_recording(route):
    out, _, _, _ = route
    result = json.loads((out / "results.json").read_text())["sim2real"]
    recorded = [json.loads(line) for line in (out / "traces.jsonl").read_text().splitlines() if line.strip()]
    assert 0 < result["real_calls"] == result["record"]["calls"] <= BUDGET
    assert result["record"]["episodes"] >= BUDGET // 13  # an episode makes at most 2NT + 1 = 13 calls
    assert recorded, "no trace written"


def test_it_fits_and_trains_on_traces_never_on_the_real_teams_parameters(route):
    """The fit gets the traces and the built-in base; training runs on the fitted profile; nothing
    before the scoring is handed the real team's profile file."""
    out, real, fitted_from, trained = route
    assert fitted_from == [(out / "traces.jsonl", "mmlu_pro", "mmlu_pro")]
    assert len(trained) == 1 and str(real) not in trained[0]
    sim_run = json.loads((out / "sim_run" / "config.json").read_text())["env"]
    assert sim_run["backend"]["profile"] == str(out / "fitted.yaml") and sim_run["backend"]["kind"] == "sim"
    fitted, true = yaml.safe_load((out / "fitted.yaml").read_text()), yaml.safe_load(real.read_text())
    assert fitted != true  # a fit, not a copy


def test_it_scores_the_greedy_policy_on_the_real_teams_held_out_episodes(route):
    out, real, _, _ = route
    result = json.loads((out / "results.json").read_text())
    assert result["config"]["env"]["backend"]["profile"] == str(real)
    assert {"qmix", "solo", "full", "chain", "star", "debate", "random"} <= set(result["eval"])
    assert all(result["eval"][name]["episodes"] == 300 for name in ("qmix", "solo", "full"))
    assert set(result["qmix_minus"]) >= {"solo", "full"}
    assert result["sim2real"]["fit"]["parameters"].get("fitted", 0) > 0


def test_it_sets_the_fitted_teams_predictions_against_what_the_real_team_scored(route, capsys):
    out, real, _, _ = route
    result = json.loads((out / "results.json").read_text())
    rows = {r["policy"]: r for r in result["sim2real"]["predicted_vs_measured"]}
    assert set(rows) == {"solo", "full", "chain", "star", "debate", "random"}
    for name, row in rows.items():
        assert row["measured_accuracy"] == result["eval"][name]["accuracy"]
        assert row["measured_tokens"] == result["eval"][name]["tokens_per_task"]
        assert row["difference"] == pytest.approx(row["measured_accuracy"] - row["predicted_accuracy"])
        assert 0 < row["se"] < 0.05 and row["miss"] == (abs(row["difference"]) > 2 * row["se"])
    # the same fitted team predicts the same figures (a seeded simulation), the true team others
    again = sim2real.predicted_vs_measured(sim2real.ExperimentConfig.from_dict(result["config"]),
                                           out / "fitted.yaml", result["eval"])
    assert [r["predicted_accuracy"] for r in again] == [rows[r["policy"]]["predicted_accuracy"] for r in again]
    truth = sim2real.predicted_vs_measured(sim2real.ExperimentConfig.from_dict(result["config"]), real, result["eval"])
    assert [r["predicted_accuracy"] for r in truth] != [r["predicted_accuracy"] for r in again]
    # python -m studies.sim2real DIR prints the tables again, and computes the predictions of an older run
    del result["sim2real"]["predicted_vs_measured"]
    (out / "results.json").write_text(json.dumps(result))
    capsys.readouterr()
    assert sim2real.show([str(out)]) == 0
    printed = capsys.readouterr().out
    assert "predicted" in printed and "beyond 2 SE" in printed and "debate" in printed
    assert json.loads((out / "results.json").read_text())["sim2real"]["predicted_vs_measured"] == list(rows.values())


def test_a_share_of_fixed_topologies_in_the_exploration_is_an_input_of_the_recording_only():
    """--explore-fixed P changes what the record stage depends on (a rerun with another P records
    afresh) and nothing else; P = 0 leaves the keys of runs made before the option existed."""
    from learners.config import DEFAULT_CONFIG, load_experiment

    real = load_experiment(DEFAULT_CONFIG)
    before = sim2real.stage_inputs(real, 4000, 0, (), None)
    assert sim2real.stage_inputs(real, 4000, 0, (), None, 0.0) == before and "explore_fixed" not in before["record"]
    mixed = sim2real.stage_inputs(real, 4000, 0, (), None, 0.3)
    assert mixed["record"] == {**before["record"], "explore_fixed": 0.3}
    assert {k: v for k, v in mixed.items() if k != "record"} == {k: v for k, v in before.items() if k != "record"}
