"""The parts of the fit added for issue 38: the exploration recorder (topo_env.fitting.explore), the Python
entry with its predictive check (topo_env.fitting.fit.fit_traces, topo_env.fitting.fit_check), the update
model's analytic gradient, gauge and global search (topo_env.fitting.fit_updates) and the flags for
parameters on a bound or on a flat likelihood (topo_env.fitting.fit_stats, topo_env.fitting.fit_report)."""
from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

import topo_env
from topo_env.references.baselines import fixed_joint_action
from topo_env.frontends.env_config import EnvConfig
from topo_env.engine.config_checks import ConfigError
from topo_env.frontends.comm_graph import build_adjacency
from topo_env.fitting.explore import default_pool, record_exploration
from topo_env.fitting.fit import FitError, fit_records, fit_traces, load_traces, main
from topo_env.fitting.fit_check import MISFIT_Z, TOPOLOGIES, plays, predictive_check
from topo_env.fitting.fit_report import AT_BOUND, FITTED, KEPT, NOT_IDENTIFIED, format_report
from topo_env.fitting.fit_stats import at_bound, hessian, std_errors
from topo_env.fitting.fit_updates import UPDATE_PARAMS, Gauge, to_gauge
from topo_env.sim.profiles import get_profile, with_overrides

# costly module fixtures: pytest-xdist (--dist loadgroup, pyproject.toml) builds them once, on one worker
pytestmark = pytest.mark.xdist_group("test_fit_parts")

EPISODES = 400  # a small trace set: enough for every part of the fit to run


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    path = tmp_path_factory.mktemp("parts") / "traces.jsonl"
    env = topo_env.parallel_env(profile="mmlu_pro", rounds=2)
    made = record_exploration(env, path, EPISODES, seed=3)
    return path, made


@pytest.fixture(scope="module")
def fitted(traces):
    return fit_records(load_traces([traces[0]]), get_profile("mmlu_pro"))


# ------------------------------------------------------------------------------------------------
# record_exploration


def test_record_exploration_contract(traces, tmp_path):
    path, made = traces
    records = load_traces([path])
    assert made["episodes"] == EPISODES == len(records)
    # calls: every agent call and one decision per episode; tokens: the episodes' team tokens
    assert made["calls"] == sum(len(r["calls"]) for rec in records for r in rec["rounds"]) + EPISODES
    assert made["tokens"] == sum(rec["team_tokens"] for rec in records)
    # train tasks from a pool of default_pool(E) indices: tasks recur
    ids = [rec["task"]["id"] for rec in records]
    assert all("-train-" in i for i in ids) and len(set(ids)) <= default_pool(EPISODES) < EPISODES
    assert {int(i.rsplit("-", 1)[1]) for i in ids} <= set(range(default_pool(EPISODES)))
    # independent uniform actions: many different graphs
    graphs = {json.dumps(r["adjacency"]) for rec in records for r in rec["rounds"]}
    assert len(graphs) > 30
    # seeded: the same seed writes the same episodes; recording stops at the end
    env = topo_env.parallel_env(profile="mmlu_pro", rounds=2)
    again = tmp_path / "again.jsonl"
    assert record_exploration(env, again, 5, seed=3, pool=7) == record_exploration(
        topo_env.parallel_env(profile="mmlu_pro", rounds=2), tmp_path / "twin.jsonl", 5, seed=3, pool=7)
    assert again.read_text() == (tmp_path / "twin.jsonl").read_text()
    env.reset(seed=0)
    while env.agents:
        env.step({a: 1 for a in env.agents})
    assert len(again.read_text().splitlines()) == 5  # the env no longer records


@pytest.mark.parametrize("kwargs,match", [
    ({"episodes": 0}, r"episodes=0; give an integer >= 1"),
    ({"episodes": 2.5}, r"episodes=2\.5"),
    ({"seed": "1"}, r"seed='1'; give an integer"),
    ({"pool": 0}, r"pool=0; give an integer >= 1"),
    ({"fixed_share": 1.5}, r"fixed_share=1\.5; give a share between 0 and 1"),
])
def test_record_exploration_bad_input(kwargs, match, tmp_path):
    args = {"episodes": 2, "seed": 0, "pool": None, **kwargs}
    with pytest.raises(ConfigError, match=match):
        record_exploration(topo_env.parallel_env(profile="mmlu_pro"), tmp_path / "t.jsonl", **args)
    assert not (tmp_path / "t.jsonl").exists()


def no_messages(record: dict) -> bool:
    return not any(any(map(any, r["adjacency"])) for r in record["rounds"])


def test_record_exploration_plays_fixed_topologies_at_the_share_asked(tmp_path):
    """fixed_share 1: every episode is one of the five fixed topologies (few graphs; solo, a graph
    random actions never play, in about a fifth); 0.5: about half the episodes, the rest random."""
    all_fixed, half = tmp_path / "fixed.jsonl", tmp_path / "half.jsonl"
    record_exploration(topo_env.parallel_env(profile="mmlu_pro", rounds=2), all_fixed, 200, seed=5, fixed_share=1.0)
    records = load_traces([all_fixed])
    graphs = {json.dumps(r["adjacency"]) for rec in records for r in rec["rounds"]}
    assert len(graphs) <= 12
    assert 0.12 < sum(map(no_messages, records)) / len(records) < 0.30
    record_exploration(topo_env.parallel_env(profile="mmlu_pro", rounds=2), half, 400, seed=5, fixed_share=0.5)
    records = load_traces([half])
    assert len({json.dumps(r["adjacency"]) for rec in records for r in rec["rounds"]}) > 30
    assert 0.05 < sum(map(no_messages, records)) / len(records) < 0.16


# ------------------------------------------------------------------------------------------------
# the update model: gradient, gauge, search


def test_update_gradient_matches_finite_differences(fitted):
    um, _ = fitted.updates
    rng = np.random.default_rng(0)
    t = np.array([0.2, 0.3, 0.1, 1.2, 0.7, 1.1, 0.3])
    v = rng.uniform(-1, 1, um.n_subjects)
    _, gt, gv = um.structural(t, v, grad=True)
    h = 1e-6
    for j in range(7):
        e = np.zeros(7)
        e[j] = h
        fd = (um.structural(t + e, v).sum() - um.structural(t - e, v).sum()) / (2 * h)
        assert gt.sum(0)[j] == pytest.approx(fd, rel=1e-4, abs=1e-4), UPDATE_PARAMS[j]
    assert np.allclose(gv, (um.structural(t, v + h) - um.structural(t, v - h)) / (2 * h), atol=1e-4)
    # per-call scores sum to the gradient
    scores = um.call_scores(t, v)
    assert np.allclose(scores[:, :7].sum(0), gt.sum(0), atol=1e-6)
    assert np.allclose(np.bincount(um.subject, weights=scores[:, 7], minlength=um.n_subjects), gv, atol=1e-6)


def test_gauge_map_keeps_every_subjects_recognition_and_pull():
    rng = np.random.default_rng(1)
    t = np.array([0.1, 0.2, 0.3, 1.5, 0.6, 1.3, 0.2])
    v = rng.uniform(-1, 1, 6)
    w, v_base = rng.uniform(1, 3, 6), rng.uniform(-1, 1, 6)
    gauge = Gauge.of(w, v_base)
    t2, v2, mapped = to_gauge(t, v, gauge)
    assert mapped
    assert np.allclose(t[2] + t[3] * v, t2[2] + t2[3] * v2) and np.allclose(t[4] - t[5] * v, t2[4] - t2[5] * v2)
    assert gauge.weights @ v2 == pytest.approx(gauge.mean) and t2[3] + t2[5] >= 0
    assert np.sqrt(gauge.weights @ (v2 - gauge.mean) ** 2) == pytest.approx(gauge.sd)
    flipped, v3, _ = to_gauge(np.r_[t[:3], -t[3], t[4], -t[5], t[6]], -v, gauge)  # the mirror image maps alike
    assert np.allclose(flipped, t2) and np.allclose(v3, v2)


def test_search_reports_starts_and_beats_the_truth(fitted):
    um, res = fitted.updates
    assert len(res.starts) >= 4 and res.nll == min(s.nll for s in res.starts)
    notes = " ".join(fitted.report["notes"])
    assert "the best of" in notes and "starts" in notes and "likelihood ratio" in notes
    # the traces come from mmlu_pro itself: its own parameters cannot beat the reported maximum
    base = get_profile("mmlu_pro")
    t = np.array([getattr(base, n) for n in UPDATE_PARAMS])
    v = np.array(base.verifiability)
    assert res.nll <= -um.structural(t, v).sum() + 1e-6


def test_a_hessian_over_blocks_moves_one_parameter_of_every_block_at_once():
    """Three blocks of two parameters and two shared ones (each block's terms touch its own and the shared
    parameters only): 2 + 2 gradient evaluations past the first give the Hessian that 8 one at a time give."""
    rng = np.random.default_rng(0)
    blocks = np.array([0, 0, 1, 1, 2, 2, -1, -1])
    terms = [(np.array([2 * b, 2 * b + 1, 6, 7]), rng.normal(size=(4, 4))) for b in range(3)]

    def value_and_grad(x):
        calls.append(1)
        f, g = 0.0, np.zeros(len(x))
        for idx, a in terms:  # log(1 + exp(a y)) summed, y = this block's and the shared parameters
            z = a @ x[idx]
            f += np.logaddexp(0.0, z).sum()
            g[idx] += a.T @ (1.0 / (1.0 + np.exp(-z)))
        return f, g

    x = rng.normal(size=8)
    calls = []
    one_at_a_time = hessian(value_and_grad, x, step=1e-6)
    assert len(calls) == 9
    calls = []
    grouped = hessian(value_and_grad, x, step=1e-6, blocks=blocks)
    assert len(calls) == 5
    assert np.allclose(grouped, one_at_a_time, rtol=1e-6, atol=1e-7)
    assert grouped[0, 2] == 0.0 and grouped[1, 5] == 0.0  # blocks never meet
    assert np.abs(grouped[:6, 6:]).min() > 1e-3  # a block and the shared parameters do


# ------------------------------------------------------------------------------------------------
# flags: at bound, not identified


def test_flat_directions_are_not_identified():
    h = np.diag([4.0, 1.0, 0.0])
    se, cov = std_errors(h)
    assert se[0] == pytest.approx(0.5) and se[1] == pytest.approx(1.0) and np.isnan(se[2])
    h = np.array([[1.0, 1.0, 0.0], [1.0, 1.0, 0.0], [0.0, 0.0, 2.0]])  # only the sum of the first two is seen
    se, _ = std_errors(h)
    assert np.isnan(se[:2]).all() and se[2] == pytest.approx(2 ** -0.5)
    assert at_bound(0.0, (0.0, 20.0)) == "lower" and at_bound(10.0, (-10.0, 10.0)) == "upper"
    assert at_bound(0.5, (0.0, 20.0)) is None and at_bound(3.0, (1e-4, None)) is None


def test_parameters_on_a_bound_are_flagged(tmp_path):
    """A team whose agents shun their own fresh attempt (w_fresh < 0, outside the fit's range [0, 20]): the
    maximum sits on the bound; the report says so, without a standard error, and says what would identify it."""
    truth = with_overrides(get_profile("mmlu_pro"), w_fresh=-0.5, name="shy")
    path = tmp_path / "truth.yaml"
    from topo_env.fitting.fit import write_profile

    write_profile(truth, path)
    traces = tmp_path / "t.jsonl"
    record_exploration(topo_env.parallel_env(profile=str(path), rounds=2), traces, 600, seed=1)
    profile, report = fit_traces(traces, "mmlu_pro", check=False)
    row = {r["parameter"]: r for r in report["parameters"]}["w_fresh"]
    assert row["status"] == AT_BOUND and row["se"] is None and row["bound"] == 0.0 and profile.w_fresh == 0.0
    assert any(n.startswith("w_fresh = 0 is at bound") and "would identify it" in n for n in report["notes"])
    assert {r["status"] for r in report["parameters"]} <= {FITTED, AT_BOUND, NOT_IDENTIFIED, KEPT}


# ------------------------------------------------------------------------------------------------
# the Python entry and the predictive check


def test_fit_traces_returns_profile_report_and_check(traces, tmp_path, capsys):
    """The Python entry and the command line give the same fit, its report and the predictive check."""
    profile, report = fit_traces(traces[0], "mmlu_pro", seed=0)
    assert profile.name == "mmlu_pro-fit" and report["episodes"] == EPISODES
    check = report["check"]
    assert [r["topology"] for r in check["topologies"]] == list(TOPOLOGIES)
    for row in check["topologies"]:
        for what in ("accuracy", "tokens", "reward"):
            assert row["fitted"][what]["se"] > 0
    groups = {r["group"]: r for r in check["replay"]}
    assert groups["all recorded episodes"]["episodes"] == EPISODES
    assert sum(r["episodes"] for g, r in groups.items() if g != "all recorded episodes") == EPISODES
    # the team the traces came from reproduces them
    for r in check["replay"]:
        assert all(abs(z) < 3 for z in r["z"].values())
    assert not any("MISFIT" in n for n in check["notes"])
    text = format_report({**report, "out": "x"})
    assert "predictive check" in text and "recorded episodes replayed" in text and "note: update calls" in text
    out = tmp_path / "p.yaml"
    assert main([str(traces[0]), "--out", str(out), "--base", "mmlu_pro", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["check"] == json.loads(json.dumps(check)) and get_profile(str(out)).w_peer == pytest.approx(
        profile.w_peer)


def test_check_is_seeded(fitted):
    one, two = (predictive_check(fitted, seed=5, draws=3, episodes=300, replays=1) for _ in range(2))
    assert one == two and predictive_check(fitted, seed=6, draws=3, episodes=300, replays=1) != one


def test_check_flags_a_team_that_does_not_reproduce_the_traces(fitted):
    """The check can fail: a team whose peers always win (w_peer x 20) and who spend twice the tokens
    is far from the recorded one in the replay."""
    wrong = replace(fitted.profile, w_peer=fitted.profile.w_peer * 20, reason_mean=fitted.profile.reason_mean * 2)
    check = predictive_check(replace(fitted, profile=wrong), draws=2, episodes=500, replays=2)
    tokens = next(r for r in check["replay"] if r["group"] == "all recorded episodes")["z"]["tokens"]
    assert tokens > MISFIT_Z and any("MISFIT" in n and "tokens" in n for n in check["notes"])


def test_fixed_topologies_are_recognised_in_recorded_rounds():
    roles = ("specialist", "specialist", "analyzer")
    for name in TOPOLOGIES:
        for targets in ([1, 2, 0], [1, 0, 0], [2, 2, 1]):
            rnd = {"adjacency": build_adjacency(fixed_joint_action(name, 3, roles), targets).tolist(),
                   "active": [1, 1, 1], "verify": [0, 0, 0]}
            also = {t for t in TOPOLOGIES if plays(t, rnd, roles)} - {name}
            assert plays(name, rnd, roles), (name, targets)
            # the fully connected graph is also a debate (every agent paired with another): the only overlap
            assert also <= {"full": {"debate"}, "debate": {"full"}}.get(name, set()), (name, targets, also)
    chain = {"adjacency": build_adjacency(fixed_joint_action("chain", 3), None).tolist(), "active": [1, 1, 1],
             "verify": [1, 1, 0]}
    assert not any(plays(t, chain, roles) for t in TOPOLOGIES)


@pytest.mark.parametrize("call,match", [
    (lambda p: fit_traces(p, "nope"), r"--base 'nope': unknown profile"),
    (lambda p: fit_traces(p, "mmlu_pro", seed=1.5), r"seed=1\.5: give an integer"),
    (lambda p: fit_traces(p, "mmlu_pro", config="env.yaml"), r"config='env\.yaml': give a topo_env\.EnvConfig"),
    (lambda p: fit_traces(p.parent / "missing.jsonl"), r"missing\.jsonl' does not exist"),
])
def test_fit_traces_bad_input(call, match, traces):
    with pytest.raises(FitError, match=match):
        call(traces[0])


def test_check_uses_the_env_config(fitted):
    config = EnvConfig.from_dict({"n_agents": 3, "rounds": 3, "profile": "mmlu_pro", "w_tok": 0.0})
    check = predictive_check(fitted, config, draws=2, episodes=300, replays=1)
    assert check["rounds"] == 3
    for row in check["topologies"]:  # no token penalty: reward = 1.25 accuracy
        assert row["fitted"]["reward"]["mean"] == pytest.approx(1.25 * row["fitted"]["accuracy"]["mean"])


def test_an_agent_that_is_better_everywhere_stays_better_in_the_fitted_team(tmp_path):
    """The skill deviations' shrinkage keeps each agent's main effect (resting on all its attempts) apart
    from the agent-by-subject rest (a few dozen attempts a cell): a team whose agent 1 is 0.9 logits
    better than agent 0 over the subjects is fitted with agent 1 clearly ahead, not with equal agents."""
    from topo_env.fitting.fit_ability import Shrinkage

    base = get_profile("mmlu_pro")
    abilities = (-0.4, 0.4, 0.0)
    truth = replace(base, name="uneven", task_set=base.name,
                    team=tuple(replace(m, ability=a) for m, a in zip(base.team_models(3), abilities)))
    from topo_env.fitting.fit import write_profile

    write_profile(truth, tmp_path / "uneven.yaml")
    path = tmp_path / "traces.jsonl"
    record_exploration(topo_env.parallel_env(profile=str(tmp_path / "uneven.yaml"), rounds=2), path, 900, seed=4,
                       pool=900)
    fitted = fit_records(load_traces([path]), base)
    weights = np.array([s[1] for s in base.subjects], dtype=float)
    weights /= weights.sum()
    main, true_main = (np.array(team.skills(3)) @ weights for team in (fitted.profile, truth))
    assert main[1] - main[0] > 0.5 and np.abs(main - true_main).max() < 0.35  # shrunk to equal agents: 0.1 apart
    assert any("each agent's mean deviation by" in n for n in fitted.report["notes"])
    # the two factors, by hand: main effects and the rest shrink apart
    shrink = Shrinkage(1.0, 0.0, np.array([0.5, 0.5, 0.0]))
    dev = np.array([[1.0, -1.0, 7.0], [-1.0, 3.0, 7.0]])
    np.testing.assert_allclose(shrink.apply(dev), [[0.0, 0.0, 7.0], [1.0, 1.0, 7.0]])
