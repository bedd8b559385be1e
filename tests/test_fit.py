"""Tests of topo_env.fitting.fit: traces of a known simulated profile are fitted back to its parameters,
the written profile runs in the env, bad input is refused in one line with exit status 2."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import topo_env
from topo_env.fitting.explore import record_exploration
from topo_env.fitting.fit import FitError, fit_profile, fit_records, load_traces, main, write_profile
from topo_env.fitting.fit_report import truth_values
from topo_env.engine.traces import read_truth
from topo_env.sim.profiles import get_profile, with_overrides

# costly module fixtures: pytest-xdist (--dist loadgroup, pyproject.toml) builds them once, on one worker
pytestmark = pytest.mark.xdist_group("test_fit")

ROOT = Path(__file__).resolve().parents[1]

# The generating profile: every checked parameter is set here (not taken from profiles.py, whose values
# are being tuned), and off the starting values the fit gets in BASE_START.
TRUTH = dict(alpha=1.5, beta=8.0, task_spread=1.5, trap_base=0.54, trap_slope=0.49, w_fresh=0.3, w_commit=1.0,
             w_peer=0.3, rho=0.4, rho_v=1.5, rho_d=0.25, theta=0.8, theta_v=1.3, tau=0.3, drift_cw=0.1,
             drift_wc=0.08, mu_correct=1.4, mu_wrong=0.6, kappa=1.0, sigma_conf=0.8, decide_tau=0.1,
             content_mean=150.0, reason_mean=800.0, revisit=0.45, reemit=0.05, conflict=0.8, sys_tokens=120,
             header_tokens=15, blind_spread=0.5)
# Every checked parameter starts outside its tolerance (a fit that never moved one would fail), the
# verifiabilities too: the base gives each subject the verifiability of the subject 7 places away in the
# truth's ranking (ROTATE).
BASE_START = dict(alpha=2.1, beta=6.0, task_spread=1.0, trap_base=0.4, trap_slope=0.3, w_fresh=0.6, w_peer=0.15,
                  rho=-0.7, rho_v=0.5, theta=0.1, theta_v=2.2, tau=0.2, drift_cw=0.04, drift_wc=0.15,
                  mu_correct=1.0, mu_wrong=0.3, kappa=0.5, sigma_conf=0.6, decide_tau=0.2, content_mean=200.0,
                  reason_mean=600.0, revisit=0.3, reemit=0.1, conflict=0.5, sys_tokens=100, header_tokens=10)
# parameter: absolute tolerance; each must also be within 3 standard errors of the truth (the truth in the
# fit's terms: rho, rho_v, theta, theta_v and the verifiabilities in its gauge, topo_env.fitting.fit_report.truth_values)
TOLERANCE = dict(alpha=0.3, beta=1.2, task_spread=0.35, trap_base=0.08, trap_slope=0.15, w_fresh=0.2, w_peer=0.08,
                 rho=0.3, rho_v=0.5, theta=0.3, theta_v=0.6, tau=0.08, drift_cw=0.02, drift_wc=0.03,
                 mu_correct=0.08, mu_wrong=0.08, kappa=0.25, sigma_conf=0.05, decide_tau=0.06,
                 content_mean=7.5, reason_mean=40.0, revisit=0.05, reemit=0.02, conflict=0.15)
EXACT = ("sys_tokens", "header_tokens")  # deterministic in the model: within +-1 token
EPISODES, TASK_POOL = 3000, 1000
ROTATE = 7


def rotated(subjects: tuple) -> tuple:
    """``subjects`` with each one's verifiability taken from the subject ROTATE places away in their ranking."""
    order = sorted(range(len(subjects)), key=lambda k: subjects[k][3])
    rank = {k: r for r, k in enumerate(order)}
    return tuple((name, w, offset, subjects[order[(rank[k] + ROTATE) % len(subjects)]][3])
                 for k, (name, w, offset, _) in enumerate(subjects))


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fit")
    truth = with_overrides(get_profile("mmlu_pro"), **TRUTH)
    truth_path = tmp / "truth.yaml"
    truth = write_profile(truth, truth_path)
    traces = tmp / "traces.jsonl"
    hidden = tmp / "hidden.jsonl"  # the tasks' truth, apart from the traces
    record_exploration(topo_env.parallel_env(profile=str(truth_path), rounds=2), traces, EPISODES, seed=0,
                       pool=TASK_POOL, truth=hidden)
    base = with_overrides(truth, **BASE_START, subjects=rotated(truth.subjects))
    result = fit_records(load_traces([traces]), base)
    profile, report = result.profile, result.report
    out = tmp / "fitted.yaml"
    write_profile(profile, out)
    expected = truth_values(truth, base, report, 3)
    return dict(truth=truth, base=base, profile=profile, report=report, out=out, traces=traces, tmp=tmp,
                expected=expected, search=result.updates[1], hidden=read_truth(hidden), data=result.data)


def rows(report):
    return {r["parameter"]: r for r in report["parameters"]}


@pytest.mark.parametrize("name", sorted(TOLERANCE))
def test_parameters_are_recovered(fitted, name):
    truth = fitted["expected"][name]
    assert abs(getattr(fitted["base"], name) - truth) > TOLERANCE[name]  # the fit starts outside the tolerance
    row = rows(fitted["report"])[name]
    assert row["status"] == "fitted" and row["calls"] > 0
    value, se = row["value"], row["se"]
    assert se is not None and 0 < se < TOLERANCE[name], (name, se)
    assert abs(value - truth) <= TOLERANCE[name], (name, value, truth)
    assert abs(value - truth) <= 3 * se, (name, value, truth, se)
    assert getattr(fitted["profile"], name) == pytest.approx(value)


@pytest.mark.parametrize("name", EXACT)
def test_token_constants_are_exact(fitted, name):
    row = rows(fitted["report"])[name]
    assert row["status"] == "fitted"
    assert abs(row["value"] - getattr(fitted["truth"], name)) <= 1
    assert getattr(fitted["profile"], name) == getattr(fitted["truth"], name)


def test_verifiabilities_and_skills(fitted):
    truth, r, expected = fitted["truth"], rows(fitted["report"]), fitted["expected"]
    z = []
    for s, name in enumerate(truth.subject_names):
        row = r[f"verifiability[{name}]"]
        want = expected[f"verifiability[{name}]"]
        assert row["status"] == "fitted"
        assert abs(fitted["base"].verifiability[s] - want) > 0.35  # started outside the tolerance
        assert abs(row["value"] - want) <= 0.35, (name, row, want)
        z.append((row["value"] - want) / row["se"])
    assert max(abs(x) for x in z) <= 3.5, z  # 14 subjects: the largest |z| of 14 normals
    # per-agent skills: explicit in the team, and the fitted per-(agent, subject) logits track the truth's
    models = fitted["profile"].team_models(3)
    assert all(len(m.skills) == len(truth.subject_names) for m in models)
    fit_cells = np.array([[m.skill(s) for s in truth.subject_names] for m in models])
    fit_cells = fit_cells + np.array(fitted["profile"].subject_offsets)[None, :] + fitted["profile"].alpha
    true_cells = np.array(truth.skills(3)) + np.array(truth.subject_offsets)[None, :] + truth.alpha
    assert np.abs(fit_cells - true_cells).mean() < 0.3


def test_the_search_reports_the_best_of_its_starts(fitted):
    """The base (verifiabilities rotated among the subjects) is one of several starts; the reported maximum
    is the best of them, a local search from the base ends far below it, and the report says both."""
    search = fitted["search"]
    names = [s.name for s in search.starts]
    assert "free stage" in names and "base" in names and len(names) >= 4
    assert search.nll == min(s.nll for s in search.starts)
    assert next(s for s in search.starts if s.name == "base").nll > search.nll + 10
    assert any(n.startswith(f"update calls: the best of {len(names)} starts") for n in fitted["report"]["notes"])


def test_unidentified_parameters_are_kept(fitted):
    r = rows(fitted["report"])
    for name in ("w_commit", "rho_d", "contradicted_weight", "verify_detect", "debug_gain"):
        assert r[name]["status"] == "kept from base"
        assert getattr(fitted["profile"], name) == getattr(fitted["base"], name)


def test_fitted_profile_runs_in_env(fitted):
    path = str(fitted["out"])
    loaded = get_profile(path)
    assert loaded.w_peer == pytest.approx(fitted["profile"].w_peer)
    assert loaded.subjects == fitted["profile"].subjects
    env = topo_env.parallel_env(profile=path, rounds=2)
    rewards = []
    for ep in range(20):
        env.reset(seed=ep)
        while env.agents:
            _, rew, *_ = env.step({a: ep % 6 for a in env.agents})
            rewards.append(sum(rew.values()))
    assert np.isfinite(rewards).all() and env.accuracy in (0.0, 1.0)


def test_traces_hold_no_hidden_task_variable_and_the_latents_are_inferred(fitted):
    """A simulated team's traces hold what a real team's would (no difficulty, latent, bucket or trap): the
    fit infers the difficulty (its posterior mean follows the truth kept apart) and the trap (a latent
    answer per task, mostly the true one), and the report says so."""
    hidden_keys = {"difficulty", "latent", "bucket", "trap", "answers", "subject_index"}
    for line in fitted["traces"].read_text().splitlines()[:200]:
        rec = json.loads(line)
        assert not hidden_keys & set(rec["task"]["metadata"]) and "hidden" not in rec["task"]
    data, hidden = fitted["data"], fitted["hidden"]
    assert data.d_estimated.all() and not data.trap_known.any()
    d_true = np.array([hidden[t.key]["difficulty"] for t in data.tasks])
    assert np.corrcoef(d_true, data.difficulty)[0, 1] > 0.6
    with_trap = [t for t in data.tasks if t.trap is not None]
    assert len(with_trap) > 200 and np.mean([t.trap == hidden[t.key]["trap"] for t in with_trap]) > 0.75
    notes = " ".join(fitted["report"]["notes"])
    assert "no difficulty" in notes and "inferred as a latent answer" in notes
    assert rows(fitted["report"])["diff_a"]["status"] == "kept from base"


def test_cli_writes_profile_and_report(fitted, tmp_path, capsys):
    small = tmp_path / "small.jsonl"
    small.write_text("".join(fitted["traces"].read_text().splitlines(keepends=True)[:300]))
    out = tmp_path / "p.yaml"
    assert main([str(small), "--out", str(out), "--base", "mmlu_pro", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["episodes"] == 300 and out.is_file()
    statuses = {r["status"] for r in result["parameters"]}
    assert {"fitted", "kept from base"} <= statuses <= {"fitted", "kept from base", "at bound", "not identified"}
    get_profile(str(out))


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "topo_env.fitting.fit", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)


def test_bad_trace_line(fitted, tmp_path):
    bad = tmp_path / "bad.jsonl"
    first = fitted["traces"].read_text().splitlines()[0]
    rec = json.loads(first)
    del rec["rounds"][0]["calls"][0]["answer"]
    bad.write_text(first + "\n{not json\n")
    with pytest.raises(FitError, match=r"bad\.jsonl:2: not JSON"):
        load_traces([bad])
    bad.write_text(first + "\n" + first + "\n" + json.dumps(rec) + "\n")
    with pytest.raises(FitError, match=r"bad\.jsonl:3: field 'rounds\[0\]\.calls\[0\]' lacks \['answer'\]"):
        load_traces([bad])
    proc = _cli(str(bad), "--out", str(tmp_path / "x.yaml"))
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "bad.jsonl:3" in lines[0] and "answer" in lines[0] and "Traceback" not in proc.stderr
    assert not (tmp_path / "x.yaml").exists()


def test_missing_file_and_no_usable_calls(fitted, tmp_path):
    proc = _cli(str(tmp_path / "nope.jsonl"), "--out", str(tmp_path / "x.yaml"))
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and "nope.jsonl" in proc.stderr and "does not exist" in proc.stderr
    rec = json.loads(fitted["traces"].read_text().splitlines()[0])
    rec["rounds"] = []
    empty = tmp_path / "empty.jsonl"
    empty.write_text(json.dumps(rec) + "\n")
    with pytest.raises(FitError, match="no usable calls"):
        fit_profile(load_traces([empty]), fitted["base"], where=str(empty))
    with pytest.raises(FitError, match="empty.jsonl.*no usable calls"):
        main([str(empty), "--out", str(tmp_path / "y.yaml")])


def test_a_team_without_reasoning_tokens_and_unknown_task_sizes(tmp_path):
    """A small model's traces (SmolLM2 on small_math): no call reports reasoning tokens, and the
    tasks do not say how many prompt tokens they hold. reason_mean is fitted to 0, not kept from the
    base (which would add its reasoning tokens to every simulated call), and sys_tokens +
    task_tokens_mean, whose sum alone is identified, reproduce the prompts."""
    truth = with_overrides(get_profile("mmlu_pro"), **{**TRUTH, "reason_mean": 0.0})
    truth_path = tmp_path / "truth.yaml"
    truth = write_profile(truth, truth_path)
    traces = tmp_path / "traces.jsonl"
    hidden = tmp_path / "hidden.jsonl"
    record_exploration(topo_env.parallel_env(profile=str(truth_path), rounds=2), traces, 400, seed=1, pool=200,
                       truth=hidden)
    truth_of = read_truth(hidden)
    lines = []
    for line in traces.read_text().splitlines():
        rec = json.loads(line)
        meta = rec["task"]["metadata"]  # a dataset that publishes each task's difficulty level (as small_math)
        rec["task"]["metadata"] = {"subject": meta["subject"], "difficulty": truth_of[rec["task"]["id"]]["difficulty"]}
        lines.append(json.dumps(rec))
    traces.write_text("\n".join(lines) + "\n")
    records = load_traces([traces])
    assert all(c["reasoning_tokens"] == 0 for rec in records for r in rec["rounds"] for c in r["calls"])
    base = with_overrides(truth, **BASE_START)  # reason_mean 600, sys_tokens 100
    profile, report = fit_profile(records, base)
    r = rows(report)
    assert r["reason_mean"]["status"] == "fitted" and profile.reason_mean == 0.0
    assert r["sys_tokens"]["status"] == r["task_tokens_mean"]["status"] == "fitted"
    assert profile.sys_tokens / profile.task_tokens_mean == pytest.approx(base.sys_tokens / base.task_tokens_mean, rel=0.01)
    d = np.array([json.loads(line)["task"]["metadata"]["difficulty"] for line in lines])
    grow = float(np.mean(0.7 + 0.6 * d))
    true_total = truth.sys_tokens + truth.task_tokens_mean * grow * np.exp(0.02)  # task tokens carry exp(0.2 z)
    assert profile.sys_tokens + profile.task_tokens_mean * grow == pytest.approx(true_total, rel=0.05)
