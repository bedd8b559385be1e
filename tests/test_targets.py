"""Tests of topo_env.frontends.targets.choose_targets and of the targets the env actually uses."""
from __future__ import annotations

import numpy as np
import pytest

from topo_env import parallel_env
from topo_env.frontends.targets import TARGET_RULES, choose_targets

QUERY = 2


def run(rule, answers, confs):
    a = np.array([answers], dtype=np.int64)
    c = np.array([confs], dtype=np.float64)
    out = choose_targets(rule, a, c, a.shape[1])
    assert out.shape == a.shape and out.dtype == np.int64
    return out[0].tolist()


def reference(rule, answers, confs):
    """Slow, obviously-correct version of the documented rules."""
    n = len(answers)
    out = []
    for i in range(n):
        peers = [(i + k) % n for k in range(1, n)]  # ring order
        if rule == "ring":
            out.append(peers[0])
            continue
        pool = peers
        if rule == "disagree":
            differ = [p for p in peers if not (answers[p] == answers[i] and answers[p] >= 0)]
            pool = differ or peers
        best = max(confs[p] for p in pool)
        out.append(next(p for p in pool if confs[p] == best))
    return out


# ---------------------------------------------------------------------------------------
# hand-made cases
# ---------------------------------------------------------------------------------------


def test_round_zero_is_ring_for_every_rule():
    for rule in TARGET_RULES:
        for n in (2, 3, 5):
            out = choose_targets(rule, None, None, n)
            assert out.shape == (1, n) and out.dtype == np.int64
            assert out[0].tolist() == [(i + 1) % n for i in range(n)]


def test_ring_ignores_answers():
    answers = np.array([[0, 1, 2, 3], [5, 5, 5, 5]])
    confs = np.array([[0.1, 0.9, 0.2, 0.8], [0.9, 0.1, 0.1, 0.1]])
    out = choose_targets("ring", answers, confs, 4)
    assert out.tolist() == [[1, 2, 3, 0], [1, 2, 3, 0]]


def test_disagree_picks_the_disagreeing_peer():
    # agents 0 and 1 agree on 0; agent 2 says 1
    assert run("disagree", [0, 0, 1], [0.9, 0.5, 0.7]) == [2, 2, 0]


def test_disagree_prefers_a_disagreeing_peer_over_a_more_confident_agreeing_one():
    # agent 2 (answer 1) agrees with agent 1 (conf .9) and disagrees with 3 and 0 (conf .2)
    # ties between 3 and 0 go to ring order from agent 2: 3 before 0
    assert run("disagree", [0, 1, 1, 2], [0.2, 0.9, 0.9, 0.2]) == [1, 3, 3, 1]


def test_disagree_most_confident_among_disagreeing():
    # agent 0 (answer 0): all peers disagree, the most confident is 3
    assert run("disagree", [0, 1, 2, 3], [0.5, 0.2, 0.4, 0.8])[0] == 3


def test_disagree_ties_go_to_ring_order():
    # all disagree with equal confidence: everyone picks i + 1
    assert run("disagree", [0, 1, 2, 3], [0.5, 0.5, 0.5, 0.5]) == [1, 2, 3, 0]
    # agent 3's candidates in ring order are 0, 1, 2; 1 and 2 tie at the top -> 1
    assert run("disagree", [9, 8, 7, 6], [0.99, 0.7, 0.7, 0.1])[3] == 0
    assert run("disagree", [9, 8, 7, 6], [0.1, 0.7, 0.7, 0.1])[3] == 1


def test_disagree_all_agree_picks_most_confident_peer():
    assert run("disagree", [2, 2, 2], [0.1, 0.8, 0.3]) == [1, 2, 1]
    # with ties in ring order
    assert run("disagree", [4, 4, 4, 4], [0.5, 0.5, 0.5, 0.5]) == [1, 2, 3, 0]


def test_missing_answers_never_agree():
    # agents 0 and 1 gave no answer (-1): they do not agree with each other
    assert run("disagree", [-1, -1, 0], [0.5, 0.9, 0.1]) == [1, 0, 1]
    # agent 1 gave no answer: 0 and 2 (who agree) pick 1 even though it is least confident
    assert run("disagree", [0, -1, 0], [0.5, 0.1, 0.9]) == [1, 2, 1]


def test_confident_rule():
    assert run("confident", [0, 1, 1, 2], [0.2, 0.9, 0.9, 0.2]) == [1, 2, 1, 1]
    assert run("confident", [0, 0, 0], [0.3, 0.3, 0.3]) == [1, 2, 0]
    assert run("confident", [0, 1, 2], [0.9, 0.1, 0.2]) == [2, 0, 0]
    # answers do not matter for "confident": a missing answer is still a candidate
    assert run("confident", [-1, 0, 0], [0.95, 0.2, 0.3]) == [2, 0, 0]


def test_batch_rows_are_independent():
    answers = np.array([[0, 0, 1], [2, 2, 2], [-1, -1, 0]])
    confs = np.array([[0.9, 0.5, 0.7], [0.1, 0.8, 0.3], [0.5, 0.9, 0.1]])
    out = choose_targets("disagree", answers, confs, 3)
    assert out.tolist() == [[2, 2, 0], [1, 2, 1], [1, 0, 1]]


def test_unknown_rule():
    with pytest.raises(ValueError, match="'nearest'"):
        choose_targets("nearest", None, None, 3)


@pytest.mark.parametrize("rule", TARGET_RULES)
@pytest.mark.parametrize("n", [2, 3, 5])
def test_random_against_reference(rule, n):
    rng = np.random.default_rng(n)
    b = 400
    answers = rng.integers(-1, 3, (b, n))
    confs = rng.choice([0.2, 0.5, 0.9], (b, n))  # few values: plenty of ties
    out = choose_targets(rule, answers, confs, n)
    assert out.shape == (b, n)
    for k in range(b):
        assert out[k].tolist() == reference(rule, answers[k].tolist(), confs[k].tolist()), (answers[k], confs[k])
        assert all(out[k, i] != i for i in range(n))


# ---------------------------------------------------------------------------------------
# through the env
# ---------------------------------------------------------------------------------------


def all_query(env):
    return {a: QUERY for a in env.agents}


@pytest.mark.parametrize("n", [3, 5])
def test_env_ring_rule(n):
    env = parallel_env(n_agents=n, rounds=3, target_rule="ring", adversarial_agents=[0])
    for seed in range(3):
        env.reset(seed=seed)
        for _ in range(3):
            _, _, _, _, infos = env.step(all_query(env))
            want = [(i + 1) % n for i in range(n)]
            assert [infos[f"agent_{i}"]["target"] for i in range(n)] == want
            assert list(env.history[-1].targets) == want
            expected = np.zeros((n, n), dtype=np.int8)
            expected[np.arange(n), want] = 1
            np.testing.assert_array_equal(env.adjacency, expected)
            np.testing.assert_array_equal(env.history[-1].adjacency, expected)


def test_env_round_one_is_ring_for_disagree():
    env = parallel_env(n_agents=4, rounds=2, target_rule="disagree")
    env.reset(seed=0)
    _, _, _, _, infos = env.step(all_query(env))
    assert [infos[f"agent_{i}"]["target"] for i in range(4)] == [1, 2, 3, 0]


@pytest.mark.parametrize("rule", ["disagree", "confident"])
def test_env_rule_uses_previous_answers(rule):
    """Round 2 targets follow the rule over round 1's final answers and confidences."""
    n = 4
    env = parallel_env(n_agents=n, rounds=2, target_rule=rule, adversarial_agents=[3])
    checked_disagreement = 0
    for seed in range(40):
        env.reset(seed=seed)
        env.step({a: 0 for a in env.agents})  # round 1: everyone solo
        _, _, _, _, infos = env.step(all_query(env))
        prev = env.history[-2].finals
        answers = [m.answer for m in prev]
        confs = [m.confidence for m in prev]
        targets = [infos[f"agent_{i}"]["target"] for i in range(n)]
        assert list(env.history[-1].targets) == targets
        for i, t in enumerate(targets):
            assert t != i
            assert env.adjacency[i, t] == 1 and env.adjacency[i].sum() == 1  # the query edge i -> t
            peers = [p for p in range(n) if p != i]
            if rule == "disagree":
                differ = [p for p in peers if answers[p] != answers[i]]
                if differ:
                    checked_disagreement += 1
                    assert answers[t] != answers[i], (seed, i, answers, targets)
                    assert confs[t] == max(confs[p] for p in differ)
                else:
                    assert confs[t] == max(confs[p] for p in peers)
            else:
                assert confs[t] == max(confs[p] for p in peers)
        codes = {s: k for k, s in enumerate(dict.fromkeys(answers))}
        assert targets == reference(rule, [codes[s] for s in answers], confs)
    if rule == "disagree":
        assert checked_disagreement > 0  # the adversary makes disagreement common


# ---------------------------------------------------------------------------------------
# choose_targets_one: the env's one-episode fast path must agree with choose_targets
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("rule", TARGET_RULES)
@pytest.mark.parametrize("n", [2, 3, 5])
def test_choose_targets_one_agrees_with_batch(rule, n):
    from topo_env.frontends.targets import choose_targets_one

    assert list(choose_targets_one(rule, None, None, n)) == choose_targets(rule, None, None, n)[0].tolist()
    rng = np.random.default_rng(50 + n)
    answers = rng.integers(-1, 3, (300, n))
    confs = rng.choice([0.2, 0.5, 0.9], (300, n))
    batch = choose_targets(rule, answers, confs, n)
    for k in range(300):
        one = choose_targets_one(rule, answers[k], confs[k].tolist(), n)
        assert [int(t) for t in one] == batch[k].tolist(), (answers[k], confs[k])
        one = choose_targets_one(rule, answers[k].tolist(), confs[k].tolist(), n)
        assert [int(t) for t in one] == batch[k].tolist(), (answers[k], confs[k])


def test_choose_targets_one_unknown_rule():
    from topo_env.frontends.targets import choose_targets_one

    with pytest.raises(ValueError, match="'nearest'"):
        choose_targets_one("nearest", None, None, 3)
