"""A small model's slips (topo_env/sim/model.py, step 6b): answers nobody proposed and replies without an
answer, in both simulator paths, and fitted back from a team's traces (topo_env/fitting/fit_slips.py)."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import topo_env
from topo_env.fitting.explore import record_exploration
from topo_env.fitting.fit import fit_profile, write_profile
from topo_env.fitting.fit_data import load_traces
from topo_env.frontends.comm_batch import CommBatchSimulator
from topo_env.sim.batch import TaskArrays
from topo_env.sim.model import NO_ANSWER, SLIPS, Input, draw_noise, simulate_vote
from topo_env.sim.numerics import ARRAYS, SCALARS
from topo_env.sim.profiles import get_profile

SLIPPING = dict(p_invent=0.2, p_invent_decide=0.15, p_unreadable=0.05, p_unreadable_decide=0.1)


def slipping(name: str = "aime25", **values):
    return replace(get_profile(name), **{**SLIPPING, **values})


def test_a_team_without_slips_plays_the_episodes_it_played_before():
    """The slips' uniforms are drawn after everything else, and only for a profile with slips: the same
    generator gives a team without them the very noise it had, and one with them the same noise plus
    three uniforms per call."""
    plain, slips = get_profile("aime25"), slipping()
    a = draw_noise(np.random.default_rng(4), plain, 50, 2, 3)
    b = draw_noise(np.random.default_rng(4), slips, 50, 2, 3)
    width = a.calls.shape[-1]
    assert b.calls.shape[-1] == width + 3
    np.testing.assert_array_equal(b.calls[..., :width], a.calls)
    np.testing.assert_array_equal(b.decision[..., :width], a.decision)
    np.testing.assert_array_equal(b.blind, a.blind)


def test_env_and_batch_simulator_agree_on_a_slipping_team(tmp_path):
    """Same task, noise and actions: the env (one call at a time) and the batch simulator give the same
    episodes when agents invent answers and reply without one."""
    path = tmp_path / "slips.yaml"
    profile = write_profile(slipping(p_unreadable=0.15), path)
    env = topo_env.parallel_env(profile=str(path), n_agents=3, rounds=2)
    sim = CommBatchSimulator(profile, 3, 2)
    rng = np.random.default_rng(5)
    tasks, noises, actions, accs, tokens, unanswered = [], [], [], [], [], 0
    for ep in range(200):
        acts = rng.integers(6, size=(2, 3))
        env.reset(seed=500 + ep)
        tasks.append(env.task), noises.append(env.backend.noise), actions.append(acts)
        for r in range(2):
            _, _, _, _, info = env.step({f"agent_{i}": int(acts[r, i]) for i in range(3)})
            unanswered += sum(m.answer is None for m in env.episode.last_outputs if m is not None)
        accs.append(info["agent_0"]["accuracy"]), tokens.append(info["agent_0"]["team_tokens"])
    res = sim.run(np.stack(actions), TaskArrays.from_tasks(tasks), type(noises[0]).concatenate(noises))
    np.testing.assert_array_equal(res.accuracy, accs)
    np.testing.assert_array_equal(res.tokens, tokens)
    assert unanswered > 0  # the slips happened


def test_slips_happen_as_often_as_the_profile_says():
    """On the batch simulator: the decision's answers off its finals and without an answer at their rates."""
    base = get_profile("aime25")
    outcomes = {}
    for name, profile in (("plain", base), ("slips", slipping("aime25"))):
        sim = CommBatchSimulator(profile, 3, 2)
        rng = np.random.default_rng(0)
        tasks, noise = sim.sample(rng, 20_000)
        res = sim.run(np.full((20_000, 2, 3), 4), tasks, noise)  # everyone broadcasts in both rounds
        outcomes[name] = res
    plain, slips = outcomes["plain"], outcomes["slips"]
    assert (plain.decision_label == NO_ANSWER).mean() == 0.0
    assert (slips.decision_label == NO_ANSWER).mean() == pytest.approx(0.1, abs=0.01)
    assert slips.accuracy.mean() < plain.accuracy.mean() - 0.05


@pytest.mark.parametrize("xp", [SCALARS, ARRAYS], ids=["one call", "arrays"])
def test_a_vote_counts_no_final_without_an_answer(xp):
    """Two finals without an answer do not outvote one answered final; none answered: scored wrong."""
    def shown(label):
        x = Input(label, 0.9, 10, 0)
        return (True, x) if xp is SCALARS else (np.array([True]), Input(*(np.array([v]) for v in x)))

    picked = simulate_vote(xp, [shown(NO_ANSWER), shown(NO_ANSWER), shown(3)], [0, 1, 2], None, 0)
    assert int(np.asarray(picked.label).ravel()[0]) == 3
    nothing = simulate_vote(xp, [shown(NO_ANSWER)], [0], None, 0)
    assert int(np.asarray(nothing.label).ravel()[0]) == -1


def test_the_fit_recovers_the_slips_from_traces(tmp_path):
    """Traces of a slipping team (random actions, no hidden variables) fit back to its four probabilities,
    each within 3 standard errors; a team without slips fits them at about 0."""
    for name, values in (("slips", SLIPPING), ("plain", dict.fromkeys(SLIPS, 0.0))):
        truth = write_profile(slipping(**values), tmp_path / f"{name}.yaml")
        env = topo_env.parallel_env(profile=str(tmp_path / f"{name}.yaml"), n_agents=3, rounds=2)
        record_exploration(env, tmp_path / f"{name}.jsonl", 900, seed=2, pool=300)
        _, report = fit_profile(load_traces([tmp_path / f"{name}.jsonl"]), get_profile("aime25"))
        rows = {row["parameter"]: row for row in report["parameters"]}
        for slip in SLIPS:
            row = rows[slip]
            if name == "plain":  # on its bound 0, or next to it
                assert row["value"] < 0.005, (slip, row)
                continue
            assert row["status"] == "fitted", (slip, row)
            assert abs(row["value"] - getattr(truth, slip)) <= 3 * row["se"], (slip, row)
            assert row["se"] < 0.25 * getattr(truth, slip), (slip, row)
