"""Tests of topo_env.frontends.comm_graph: joint action -> adjacency, adjacency -> execution plan.

Expected adjacency matrices are written out by hand (rows are senders u, columns are
receivers v: ``A[u, v] == 1`` means u -> v). Execution-plan properties are checked against
an independent strongly-connected-component computation (transitive closure by repeated
boolean matrix products), not against networkx.
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from topo_env import CommAction, build_adjacency, density, execution_plan
from topo_env.engine import plan as plan_module
from topo_env.frontends.comm_graph import build_adjacency_batch, ring_targets
from topo_env.engine.plan import PlanCache
from graph_helpers import reachability

SOLO, BCAST, QUERY, AGG, VERIFY, DEBATE = range(6)


def M(*rows: str) -> np.ndarray:
    """A literal 0/1 matrix written row by row, e.g. M("011", "000", "000")."""
    return np.array([[int(ch) for ch in row] for row in rows], dtype=np.int8)


# ---------------------------------------------------------------------------------------
# build_adjacency: every action, literal expected matrices
# ---------------------------------------------------------------------------------------

# (actions, targets or None for the ring rule, expected matrix)
CASES_N3 = [
    # agent 0 acts, the others stay solo; ring target of agent 0 is 1
    ((SOLO, SOLO, SOLO), None, M("000", "000", "000")),
    ((BCAST, SOLO, SOLO), None, M("011", "000", "000")),
    ((QUERY, SOLO, SOLO), None, M("010", "000", "000")),
    ((AGG, SOLO, SOLO), None, M("000", "100", "100")),
    ((VERIFY, SOLO, SOLO), None, M("010", "000", "000")),
    ((DEBATE, SOLO, SOLO), None, M("010", "100", "000")),
    # agent 2 acts: its ring target wraps around to 0
    ((SOLO, SOLO, BCAST), None, M("000", "000", "110")),
    ((SOLO, SOLO, QUERY), None, M("000", "000", "100")),
    ((SOLO, SOLO, AGG), None, M("001", "001", "000")),
    ((SOLO, SOLO, VERIFY), None, M("000", "000", "100")),
    ((SOLO, SOLO, DEBATE), None, M("001", "000", "100")),
    # agent 1 acts
    ((SOLO, BCAST, SOLO), None, M("000", "101", "000")),
    ((SOLO, QUERY, SOLO), None, M("000", "001", "000")),
    ((SOLO, AGG, SOLO), None, M("010", "000", "010")),
    ((SOLO, VERIFY, SOLO), None, M("000", "001", "000")),
    ((SOLO, DEBATE, SOLO), None, M("000", "001", "010")),
    # explicit targets: agent 0 points at 2 (not its ring neighbour)
    ((SOLO, SOLO, SOLO), (2, 0, 1), M("000", "000", "000")),
    ((BCAST, SOLO, SOLO), (2, 0, 1), M("011", "000", "000")),
    ((QUERY, SOLO, SOLO), (2, 0, 1), M("001", "000", "000")),
    ((AGG, SOLO, SOLO), (2, 0, 1), M("000", "100", "100")),
    ((VERIFY, SOLO, SOLO), (2, 0, 1), M("010", "000", "000")),  # verify ignores targets: i -> i+1
    ((DEBATE, SOLO, SOLO), (2, 0, 1), M("001", "000", "100")),
    ((SOLO, QUERY, SOLO), (2, 0, 1), M("000", "100", "000")),
    ((SOLO, DEBATE, SOLO), (2, 0, 1), M("010", "100", "000")),
    # everybody the same action
    ((BCAST, BCAST, BCAST), None, M("011", "101", "110")),
    ((AGG, AGG, AGG), None, M("011", "101", "110")),
    ((QUERY, QUERY, QUERY), None, M("010", "001", "100")),
    ((VERIFY, VERIFY, VERIFY), None, M("010", "001", "100")),
    ((DEBATE, DEBATE, DEBATE), None, M("011", "101", "110")),
    ((QUERY, QUERY, QUERY), (2, 0, 0), M("001", "100", "100")),
    # unions of several agents' edges
    ((BCAST, SOLO, AGG), None, M("011", "001", "000")),
    ((QUERY, AGG, SOLO), None, M("010", "000", "010")),
    ((VERIFY, DEBATE, QUERY), None, M("010", "001", "110")),
    ((DEBATE, SOLO, DEBATE), (2, 0, 0), M("001", "000", "100")),
]

CASES_N5 = [
    # agent 1 acts (ring target 2)
    ((SOLO, SOLO, SOLO, SOLO, SOLO), None, M("00000", "00000", "00000", "00000", "00000")),
    ((SOLO, BCAST, SOLO, SOLO, SOLO), None, M("00000", "10111", "00000", "00000", "00000")),
    ((SOLO, QUERY, SOLO, SOLO, SOLO), None, M("00000", "00100", "00000", "00000", "00000")),
    ((SOLO, AGG, SOLO, SOLO, SOLO), None, M("01000", "00000", "01000", "01000", "01000")),
    ((SOLO, VERIFY, SOLO, SOLO, SOLO), None, M("00000", "00100", "00000", "00000", "00000")),
    ((SOLO, DEBATE, SOLO, SOLO, SOLO), None, M("00000", "00100", "01000", "00000", "00000")),
    # agent 4 acts (ring target wraps to 0)
    ((SOLO, SOLO, SOLO, SOLO, BCAST), None, M("00000", "00000", "00000", "00000", "11110")),
    ((SOLO, SOLO, SOLO, SOLO, QUERY), None, M("00000", "00000", "00000", "00000", "10000")),
    ((SOLO, SOLO, SOLO, SOLO, AGG), None, M("00001", "00001", "00001", "00001", "00000")),
    ((SOLO, SOLO, SOLO, SOLO, VERIFY), None, M("00000", "00000", "00000", "00000", "10000")),
    ((SOLO, SOLO, SOLO, SOLO, DEBATE), None, M("00001", "00000", "00000", "00000", "10000")),
    # explicit targets: agent 1 points at 3
    ((SOLO, BCAST, SOLO, SOLO, SOLO), (1, 3, 3, 4, 0), M("00000", "10111", "00000", "00000", "00000")),
    ((SOLO, QUERY, SOLO, SOLO, SOLO), (1, 3, 3, 4, 0), M("00000", "00010", "00000", "00000", "00000")),
    ((SOLO, AGG, SOLO, SOLO, SOLO), (1, 3, 3, 4, 0), M("01000", "00000", "01000", "01000", "01000")),
    ((SOLO, VERIFY, SOLO, SOLO, SOLO), (1, 3, 3, 4, 0), M("00000", "00100", "00000", "00000", "00000")),
    ((SOLO, DEBATE, SOLO, SOLO, SOLO), (1, 3, 3, 4, 0), M("00000", "00010", "00000", "01000", "00000")),
    # everybody the same action
    ((DEBATE,) * 5, None, M("01001", "10100", "01010", "00101", "10010")),
    ((VERIFY,) * 5, None, M("01000", "00100", "00010", "00001", "10000")),
    ((BCAST,) * 5, None, M("01111", "10111", "11011", "11101", "11110")),
    ((AGG,) * 5, None, M("01111", "10111", "11011", "11101", "11110")),
    ((QUERY,) * 5, (2, 0, 4, 4, 1), M("00100", "10000", "00001", "00001", "01000")),
    # a union of all five kinds of edges
    ((QUERY, AGG, VERIFY, DEBATE, BCAST), None, M("01000", "00000", "01010", "01001", "11110")),
    ((SOLO, DEBATE, AGG, SOLO, QUERY), (3, 4, 1, 0, 2), M("00100", "00101", "00000", "00100", "01100")),
]


@pytest.mark.parametrize("actions,targets,expected", CASES_N3 + CASES_N5)
def test_build_adjacency_literal(actions, targets, expected):
    got = build_adjacency(list(actions), None if targets is None else list(targets))
    assert got.dtype == np.int8
    assert got.shape == expected.shape
    np.testing.assert_array_equal(got, expected)


def test_literal_cases_cover_every_action_for_n3_and_n5():
    for cases, n in ((CASES_N3, 3), (CASES_N5, 5)):
        for a in CommAction:
            # some case has exactly one non-solo agent choosing a, with ring targets and explicit ones
            alone = [c for c in cases if sum(x != SOLO for x in c[0]) <= 1 and a in c[0]]
            assert any(t is None for _, t, _ in alone), (n, a)
            assert any(t is not None for _, t, _ in alone), (n, a)


def test_ring_targets_default_equals_explicit_ring():
    rng = np.random.default_rng(0)
    for n in (2, 3, 5, 7):
        ring = [(i + 1) % n for i in range(n)]
        for _ in range(50):
            acts = rng.integers(0, 6, n).tolist()
            np.testing.assert_array_equal(build_adjacency(acts), build_adjacency(acts, ring))


def test_targets_of_non_pointing_agents_are_ignored():
    # agent 0 broadcasts; its "target" is itself (invalid for a pointing action) but unused
    got = build_adjacency([BCAST, SOLO, SOLO], [0, 1, 2])
    np.testing.assert_array_equal(got, M("011", "000", "000"))


def test_two_agent_team():
    np.testing.assert_array_equal(build_adjacency([QUERY, SOLO]), M("01", "00"))
    np.testing.assert_array_equal(build_adjacency([SOLO, AGG]), M("01", "00"))
    np.testing.assert_array_equal(build_adjacency([DEBATE, SOLO]), M("01", "10"))
    np.testing.assert_array_equal(build_adjacency([VERIFY, VERIFY]), M("01", "10"))


def test_union_equals_elementwise_or_of_single_agent_graphs():
    rng = np.random.default_rng(1)
    for n in (3, 5):
        for _ in range(100):
            acts = rng.integers(0, 6, n)
            tgts = (np.arange(n) + rng.integers(1, n, n)) % n
            union = np.zeros((n, n), dtype=np.int8)
            for i in range(n):
                only = np.zeros(n, dtype=np.int64)
                only[i] = acts[i]
                union |= build_adjacency(only.tolist(), tgts.tolist())
            np.testing.assert_array_equal(build_adjacency(acts.tolist(), tgts.tolist()), union)


def test_no_self_loops_for_all_joint_actions():
    for acts in itertools.product(range(6), repeat=3):
        adj = build_adjacency(list(acts))
        assert not np.diagonal(adj).any(), acts
        assert set(np.unique(adj).tolist()) <= {0, 1}


def test_direction_u_to_v():
    # agent 0 queries agent 2: 0's output goes to 2, so A[0, 2] = 1 and A[2, 0] = 0
    adj = build_adjacency([QUERY, SOLO, SOLO], [2, 0, 0])
    assert adj[0, 2] == 1 and adj[2, 0] == 0
    # agent 1 aggregates: everyone else's output goes to 1
    adj = build_adjacency([SOLO, AGG, SOLO])
    assert adj[0, 1] == 1 and adj[2, 1] == 1 and adj[1].sum() == 0


@pytest.mark.parametrize(
    "actions,targets,match",
    [
        ([SOLO], None, "at least 2"),
        ([0, 6, 0], None, r"agent 1 is 6, outside 0\.\.5"),
        ([0, 0, -1], None, "agent 2 is -1"),
        ([0.0, 1.0, 2.0], None, r"integers 0\.\.5"),
        ([QUERY, SOLO, SOLO], [0, 0, 0], r"target of agent 0 is 0: must be another agent in 0\.\.2"),
        ([SOLO, DEBATE, SOLO], [1, 3, 0], "target of agent 1 is 3"),
        ([SOLO, SOLO, QUERY], [1, 2, -1], "target of agent 2 is -1"),
        ([SOLO, SOLO, SOLO], [1, 2], "targets must be 3 integers"),
    ],
)
def test_build_adjacency_rejects_bad_input(actions, targets, match):
    with pytest.raises(ValueError, match=match):
        build_adjacency(actions, targets)


def test_density():
    assert density(M("000", "000", "000")) == 0.0
    assert density(M("011", "101", "110")) == 1.0
    assert density(M("010", "000", "000")) == pytest.approx(1 / 6)
    assert density(M("01000", "00000", "01010", "01001", "11110")) == pytest.approx(9 / 20)


# ---------------------------------------------------------------------------------------
# build_adjacency_batch
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [2, 3, 5, 7])
def test_batch_agrees_with_single(n):
    rng = np.random.default_rng(n)
    b = 300
    acts = rng.integers(0, 6, (b, n))
    tgts = (np.arange(n)[None, :] + rng.integers(1, n, (b, n))) % n
    batch = build_adjacency_batch(acts, tgts)
    assert batch.shape == (b, n, n) and batch.dtype == np.int8
    for k in range(b):
        np.testing.assert_array_equal(batch[k], build_adjacency(acts[k].tolist(), tgts[k].tolist()), err_msg=str(k))


# ---------------------------------------------------------------------------------------
# execution_plan on hand-made graphs
# ---------------------------------------------------------------------------------------


def graph(n: int, edges: list[tuple[int, int]]) -> np.ndarray:
    a = np.zeros((n, n), dtype=np.int8)
    for u, v in edges:
        a[u, v] = 1
    return a


@pytest.mark.parametrize(
    "n,edges,expected",
    [
        # chain 0 -> 1 -> 2
        (3, [(0, 1), (1, 2)], [[(0,)], [(1,)], [(2,)]]),
        # reversed chain 2 -> 1 -> 0
        (3, [(2, 1), (1, 0)], [[(2,)], [(1,)], [(0,)]]),
        # debate pair 0 <-> 1 plus isolated 2: one layer, two components
        (3, [(0, 1), (1, 0)], [[(0, 1), (2,)]]),
        # debate pair 1 <-> 2 plus isolated 0
        (3, [(1, 2), (2, 1)], [[(0,), (1, 2)]]),
        # full graph: a single component
        (3, [(0, 1), (0, 2), (1, 0), (1, 2), (2, 0), (2, 1)], [[(0, 1, 2)]]),
        # no edges: everyone alone in one layer
        (3, [], [[(0,), (1,), (2,)]]),
        # star into agent 2
        (3, [(0, 2), (1, 2)], [[(0,), (1,)], [(2,)]]),
        # star out of agent 2
        (3, [(2, 0), (2, 1)], [[(2,)], [(0,), (1,)]]),
        # ring cycle: one component
        (3, [(0, 1), (1, 2), (2, 0)], [[(0, 1, 2)]]),
        # 5 agents: SCC {0,1} then SCC {2,3,4} (cycle 2->3->4->2), joined by 1 -> 3
        (5, [(0, 1), (1, 0), (2, 3), (3, 4), (4, 2), (1, 3)], [[(0, 1)], [(2, 3, 4)]]),
        # 5 agents: SCC {3,4} feeds SCC {0,2}, agent 1 isolated
        (5, [(3, 4), (4, 3), (0, 2), (2, 0), (4, 0)], [[(1,), (3, 4)], [(0, 2)]]),
        # diamond 0 -> {1, 2} -> 3, 4 isolated
        (5, [(0, 1), (0, 2), (1, 3), (2, 3)], [[(0,), (4,)], [(1,), (2,)], [(3,)]]),
        # long-path layering: 0 -> 1 -> 2 and 0 -> 2: 2 must wait for 1
        (3, [(0, 1), (1, 2), (0, 2)], [[(0,)], [(1,)], [(2,)]]),
    ],
)
def test_execution_plan_hand_made(n, edges, expected):
    assert execution_plan(graph(n, edges)) == expected


def test_execution_plan_treats_nonzero_as_edge():
    a = np.array([[0, 2, 0], [0, 0, 5], [0, 0, 0]])
    assert execution_plan(a) == [[(0,)], [(1,)], [(2,)]]


def test_execution_plan_rejects_non_square():
    with pytest.raises(ValueError, match="square"):
        execution_plan(np.zeros((2, 3), dtype=np.int8))


# ---------------------------------------------------------------------------------------
# execution_plan properties against an independent SCC computation
# ---------------------------------------------------------------------------------------


def check_plan(adj: np.ndarray, plan) -> None:
    n = adj.shape[0]
    reach = reachability(adj)
    flat = [a for layer in plan for comp in layer for a in comp]
    assert sorted(flat) == list(range(n)), "every agent exactly once"
    layer_of, comp_of = {}, {}
    for li, layer in enumerate(plan):
        assert layer, "no empty layer"
        assert layer == sorted(layer), "components of a layer sorted by smallest agent"
        for comp in layer:
            assert list(comp) == sorted(comp)
            for a in comp:
                layer_of[a], comp_of[a] = li, comp
    # components are exactly the strongly connected components (mutual reachability)
    for u in range(n):
        scc = tuple(v for v in range(n) if reach[u, v] and reach[v, u])
        assert comp_of[u] == scc, (u, comp_of[u], scc)
    # every edge goes forward in layers or stays inside a component
    for u, v in zip(*np.nonzero(adj)):
        if comp_of[u] == comp_of[v]:
            assert layer_of[u] == layer_of[v]
        else:
            assert layer_of[u] < layer_of[v], (u, v, plan)
    # components of one layer have no edges between them
    for layer in plan:
        for c1, c2 in itertools.permutations(layer, 2):
            assert not adj[np.ix_(c1, c2)].any(), (c1, c2, plan)
    # topological generations: a component's layer is 1 + the deepest layer of its predecessors
    for v in range(n):
        preds = [u for u in range(n) if adj[u, v] and comp_of[u] != comp_of[v]]
        comp_preds = [u for w in comp_of[v] for u in range(n) if adj[u, w] and comp_of[u] != comp_of[v]]
        want = 0 if not comp_preds else 1 + max(layer_of[u] for u in comp_preds)
        assert layer_of[v] == want, (v, preds, plan)


def test_plan_properties_all_216_joint_actions_n3():
    seen = set()
    for acts in itertools.product(range(6), repeat=3):
        adj = build_adjacency(list(acts))
        plan = execution_plan(adj)
        check_plan(adj, plan)
        seen.add(len(plan))
    assert seen == {1, 2, 3}  # the sweep reaches 1-, 2- and 3-layer plans


def test_plan_properties_500_random_n5():
    rng = np.random.default_rng(5)
    multi = 0
    for _ in range(500):
        acts = rng.integers(0, 6, 5)
        tgts = (np.arange(5) + rng.integers(1, 5, 5)) % 5
        adj = build_adjacency(acts.tolist(), tgts.tolist())
        plan = execution_plan(adj)
        check_plan(adj, plan)
        multi += any(len(c) > 1 for layer in plan for c in layer) and len(plan) > 1
    assert multi > 0  # includes plans with multi-agent components after earlier layers


def test_check_plan_detects_a_wrong_plan():
    # guard: the property checker itself rejects a plan that runs the chain backwards
    with pytest.raises(AssertionError):
        check_plan(graph(3, [(0, 1), (1, 2)]), [[(2,)], [(1,)], [(0,)]])
    with pytest.raises(AssertionError):
        check_plan(graph(3, [(0, 1), (1, 0)]), [[(0,), (1,), (2,)]])


# ---------------------------------------------------------------------------------------
# PlanCache
# ---------------------------------------------------------------------------------------


def expected_arrays(adj: np.ndarray):
    n = adj.shape[0]
    layer, comp, multi = np.zeros(n, int), np.zeros(n, int), np.zeros(n, bool)
    for li, lay in enumerate(execution_plan(adj)):
        for c in lay:
            for a in c:
                layer[a], comp[a], multi[a] = li, c[0], len(c) > 1
    return layer, comp, multi


@pytest.mark.parametrize("n", [3, 5, 8])
def test_plan_arrays_agree_with_execution_plan(n):
    rng = np.random.default_rng(100 + n)
    b = 400
    acts = rng.integers(0, 6, (b, n))
    acts[: b // 4] = acts[b // 4 : b // 2]  # duplicates exercise the per-graph memo
    tgts = (np.arange(n)[None, :] + rng.integers(1, n, (b, n))) % n
    adj = build_adjacency_batch(acts, tgts)
    cache = PlanCache()
    for _ in range(2):  # second pass answers from the cache
        layer, comp, multi = cache.plan_arrays(adj)
        assert layer.shape == comp.shape == multi.shape == (b, n)
        assert layer.dtype == comp.dtype == np.int64 and multi.dtype == bool
        for k in range(b):
            el, ec, em = expected_arrays(adj[k])
            np.testing.assert_array_equal(layer[k], el, err_msg=f"layer, graph {k}")
            np.testing.assert_array_equal(comp[k], ec, err_msg=f"component, graph {k}")
            np.testing.assert_array_equal(multi[k], em, err_msg=f"multi, graph {k}")


@pytest.mark.parametrize("n", [9, 10])
def test_plan_arrays_large_teams(n):
    """Teams of 9+ agents are valid configs (n_agents has no upper bound) and the batch
    simulator calls plan_arrays for them: the plans must still be right."""
    rng = np.random.default_rng(200 + n)
    b = 100
    acts = rng.integers(0, 6, (b, n))
    tgts = (np.arange(n)[None, :] + rng.integers(1, n, (b, n))) % n
    adj = build_adjacency_batch(acts, tgts)
    layer, comp, multi = PlanCache().plan_arrays(adj)
    wrong = []
    for k in range(b):
        el, ec, em = expected_arrays(adj[k])
        if not ((layer[k] == el).all() and (comp[k] == ec).all() and (multi[k] == em).all()):
            wrong.append(k)
    assert not wrong, (
        f"BUG topo_env/frontends/comm_graph.py PlanCache.plan_arrays: for N={n}, {len(wrong)}/{b} graphs get the wrong "
        f"plan (graph code 1 << arange(N*N) overflows int64 when N*N > 63, so distinct graphs collide)"
    )


def counted_execution_plan(monkeypatch) -> list[bytes]:
    """Make topo_env.frontends.comm_graph count its execution_plan calls (the graphs, as int8 bytes)."""
    computed = []

    def counting(adjacency):
        computed.append(np.asarray(adjacency, dtype=np.int8).tobytes())
        return execution_plan(adjacency)

    monkeypatch.setattr(plan_module, "execution_plan", counting)
    return computed


def test_plan_cache_call_agrees_and_memoises(monkeypatch):
    """Each graph is planned once, in whatever dtype it comes (the same plan object is returned
    after); past ``max_entries`` graphs the cache forgets plans rather than grow."""
    computed = counted_execution_plan(monkeypatch)
    cache = PlanCache(max_entries=4)
    rng = np.random.default_rng(7)
    graphs = []
    while len(graphs) < 5:
        adj = build_adjacency(rng.integers(0, 6, 4).tolist())
        if not any(np.array_equal(adj, g) for g in graphs):
            graphs.append(adj)
    plans = [cache(g) for g in graphs[:4]]
    assert plans == [execution_plan(g) for g in graphs[:4]]
    assert len(computed) == 4
    for g, plan in zip(graphs[:4], plans):
        for same_graph in (g, g.astype(bool), g.astype(np.int64)):
            assert cache(same_graph) is plan
    assert len(computed) == 4  # every repeat was a hit
    assert cache(graphs[4]) == execution_plan(graphs[4])
    for g in graphs[:4]:
        assert cache(g) == execution_plan(g)
    assert len(computed) > 5  # five graphs do not all fit in four entries: some were planned again


def test_plan_arrays_plan_each_distinct_graph_once(monkeypatch):
    """A batch plans each distinct graph once; a later batch of known graphs plans none; a cache
    with fewer entries than graphs keeps at most that many."""
    computed = counted_execution_plan(monkeypatch)
    rng = np.random.default_rng(8)
    acts = rng.integers(0, 6, (60, 4))
    acts[30:] = acts[:30]
    adj = build_adjacency_batch(acts, np.tile(ring_targets(4), (60, 1)))
    cache = PlanCache()
    first = cache.plan_arrays(adj)
    distinct = {g.tobytes() for g in adj.astype(np.int8)}
    assert sorted(computed) == sorted(distinct)
    again = cache.plan_arrays(adj[::-1])
    assert len(computed) == len(distinct)
    for got, want in zip(again, first):
        np.testing.assert_array_equal(got, want[::-1])
    small = PlanCache(max_entries=4)  # bounded too: more graphs than entries get planned again
    small.plan_arrays(adj)
    small.plan_arrays(adj)
    assert len(computed) > 2 * len(distinct)


# ---------------------------------------------------------------------------------------
# adjacency_of: the env's unvalidated fast path must agree with the batch version
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [2, 3, 5, 7])
def test_adjacency_of_agrees_with_batch(n):
    from topo_env.frontends.comm_graph import adjacency_of

    rng = np.random.default_rng(300 + n)
    b = 300
    acts = rng.integers(0, 6, (b, n))
    tgts = (np.arange(n)[None, :] + rng.integers(1, n, (b, n))) % n
    batch = build_adjacency_batch(acts, tgts)
    for k in range(b):
        got = adjacency_of(acts[k].tolist(), tgts[k].tolist())
        assert got.dtype == np.int8
        np.testing.assert_array_equal(got, batch[k], err_msg=f"{acts[k]} {tgts[k]}")


def test_adjacency_of_literal_cases():
    from topo_env.frontends.comm_graph import adjacency_of

    for actions, targets, expected in CASES_N3 + CASES_N5:
        n = len(actions)
        tg = [(i + 1) % n for i in range(n)] if targets is None else list(targets)
        np.testing.assert_array_equal(adjacency_of(list(actions), tg), expected, err_msg=str(actions))
