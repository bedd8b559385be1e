"""Tests for the QMIX networks: AgentQNetwork (GNN-GRU-MLP), DenseGatedGraphConv, QMixer.

Message direction: an edge u -> v (A[u, v] = 1) carries u's information to v. Within one
round with L message-passing layers, a change in u's observation can reach v's Q-values
only along a directed path of at most L edges from u to v.
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from torch_geometric.nn import GatedGraphConv
from torch_geometric.utils import dense_to_sparse

from learners.agent_network import AgentQNetwork
from learners.graph_conv import DenseGatedGraphConv
from learners.mixer import IndependentQ, QMixer, VDNMixer, make_mixer

torch.set_num_threads(1)

OBS_DIM, N_ACTIONS, HIDDEN = 7, 6, 16
CHANGE_TOL = 1e-6  # a Q-value "changed" when it moved by more than this


def make_net(layers: int = 2, seed: int = 0, hidden: int = HIDDEN) -> AgentQNetwork:
    torch.manual_seed(seed)
    return AgentQNetwork(OBS_DIM, N_ACTIONS, hidden_dim=hidden, gnn_layers=layers).eval()


def adjacency(n: int, edges: list[tuple[int, int]]) -> torch.Tensor:
    a = torch.zeros(n, n)
    for u, v in edges:
        a[u, v] = 1.0
    return a


def reachable(adj: np.ndarray, hops: int) -> np.ndarray:
    """R[u, v] = True iff v is u itself or there is a directed path u -> ... -> v of <= hops edges."""
    n = adj.shape[0]
    reach = np.eye(n, dtype=bool)
    frontier = np.eye(n, dtype=bool)
    step = adj.astype(bool)
    for _ in range(hops):
        frontier = (frontier.astype(int) @ step.astype(int)) > 0
        reach |= frontier
    return reach


def influenced(net: AgentQNetwork, adj: torch.Tensor, source: int, seed: int = 0) -> set[int]:
    """Agents whose Q-values change when agent ``source``'s observation changes (one round, G = 1)."""
    n = adj.shape[0]
    gen = torch.Generator().manual_seed(seed)
    obs = torch.randn(1, n, OBS_DIM, generator=gen)
    hidden = net.initial_hidden(1, n)
    with torch.no_grad():
        q0, _ = net(obs, adj[None], hidden)
        obs2 = obs.clone()
        obs2[0, source] += 3.0 * torch.randn(OBS_DIM, generator=gen)
        q1, _ = net(obs2, adj[None], hidden)
    diff = (q1 - q0).abs().amax(dim=-1)[0]  # (N,)
    return {v for v in range(n) if diff[v] > CHANGE_TOL}


# -- shapes --------------------------------------------------------------------------------


def test_forward_shapes_and_hidden_update():
    net = make_net()
    g, n = 3, 4
    obs = torch.randn(g, n, OBS_DIM)
    adj = torch.bernoulli(torch.full((g, n, n), 0.5))
    hidden = net.initial_hidden(g, n)
    assert hidden.shape == (g, n, HIDDEN) and torch.count_nonzero(hidden) == 0
    q, z = net(obs, adj, hidden)
    assert q.shape == (g, n, N_ACTIONS)
    assert z.shape == (g, n, HIDDEN)
    assert torch.isfinite(q).all() and torch.count_nonzero(z) > 0
    # the new hidden state matters for the next round
    q_again, _ = net(obs, adj, z)
    assert not torch.allclose(q, q_again)


def test_unroll_and_embed_shapes():
    net = make_net()
    b, t, n = 2, 3, 5
    obs = torch.randn(b, t, n, OBS_DIM)
    adj = torch.bernoulli(torch.full((b, t, n, n), 0.4))
    assert net.unroll(obs, adj).shape == (b, t, n, N_ACTIONS)
    assert net.embed(obs, adj).shape == (b, t, n, HIDDEN)
    assert net.embed(obs[0, 0], adj[0, 0]).shape == (n, HIDDEN)


def test_dueling_head_is_value_plus_centred_advantage():
    """Q = V + A - mean A: the mean over actions of Q is V, Q - V is A centred, and unroll
    equals stepping forward (the head is applied the same way on both paths)."""
    torch.manual_seed(0)
    net = AgentQNetwork(OBS_DIM, N_ACTIONS, HIDDEN, 2, dueling=True)
    g, n = 3, 4
    obs = torch.randn(g, n, OBS_DIM)
    adj = torch.bernoulli(torch.full((g, n, n), 0.5))
    q, z = net(obs, adj, net.initial_hidden(g, n))
    head = net.head
    x = head.trunk(z)
    value, adv = head.value(x), head.advantage(x)
    torch.testing.assert_close(q.mean(-1, keepdim=True), value)
    torch.testing.assert_close(q - value, adv - adv.mean(-1, keepdim=True))
    seq_obs, seq_adj = torch.randn(2, 3, n, OBS_DIM), torch.bernoulli(torch.full((2, 3, n, n), 0.5))
    hidden, stepped = net.initial_hidden(2, n), []
    for t in range(3):
        q_t, hidden = net(seq_obs[:, t], seq_adj[:, t], hidden)
        stepped.append(q_t)
    torch.testing.assert_close(net.unroll(seq_obs, seq_adj), torch.stack(stepped, dim=1))


def test_mixer_shapes():
    torch.manual_seed(0)
    mixer = QMixer(n_agents=3, state_dim=5, embed_dim=8, hypernet_dim=12)
    assert mixer(torch.randn(4, 2, 3), torch.randn(4, 2, 5)).shape == (4, 2)
    assert mixer(torch.randn(6, 3), torch.randn(6, 5)).shape == (6,)


# -- message direction -------------------------------------------------------------------------


@pytest.mark.parametrize("source, expected", [(0, {0, 1, 2}), (1, {1, 2, 3}), (2, {2, 3}), (3, {3})])
def test_chain_two_layers_reaches_two_hops_downstream_only(source, expected):
    """0 -> 1 -> 2 -> 3 with L = 2: a change at 0 reaches 1 and 2, not 3; never upstream."""
    net = make_net(layers=2)
    adj = adjacency(4, [(0, 1), (1, 2), (2, 3)])
    assert influenced(net, adj, source) == expected


def test_chain_one_layer_reaches_one_hop():
    net = make_net(layers=1)
    adj = adjacency(4, [(0, 1), (1, 2), (2, 3)])
    assert influenced(net, adj, 0) == {0, 1}
    assert influenced(net, adj, 1) == {1, 2}


def test_reversed_edge_carries_messages_the_other_way():
    """Only 1 -> 0: agent 1 informs agent 0, agent 0 does not inform agent 1."""
    net = make_net(layers=2)
    adj = adjacency(4, [(1, 0)])
    assert influenced(net, adj, 1) == {0, 1}
    assert influenced(net, adj, 0) == {0}


def test_isolated_node_neither_sends_nor_receives():
    net = make_net(layers=2)
    adj = adjacency(5, [(0, 1), (1, 2), (2, 0), (1, 3)])  # agent 4 isolated
    assert influenced(net, adj, 4) == {4}
    for source in range(4):
        assert 4 not in influenced(net, adj, source)


def test_cycle_reaches_along_the_cycle_direction():
    """5-cycle 0 -> 1 -> 2 -> 3 -> 4 -> 0 with L = 2: 0 reaches 1, 2; not 3, not 4 (its predecessor)."""
    net = make_net(layers=2)
    adj = adjacency(5, [(0, 1), (1, 2), (2, 3), (3, 4), (4, 0)])
    assert influenced(net, adj, 0) == {0, 1, 2}
    assert influenced(net, adj, 3) == {3, 4, 0}
    net3 = make_net(layers=3)
    assert influenced(net3, adj, 0) == {0, 1, 2, 3}


def test_no_edges_means_no_influence_across_agents():
    net = make_net(layers=2)
    adj = torch.zeros(4, 4)
    for source in range(4):
        assert influenced(net, adj, source) == {source}


@pytest.mark.parametrize("layers", [1, 2, 3])
def test_random_graphs_match_reachability(layers):
    rng = np.random.default_rng(layers)
    net = make_net(layers=layers, seed=layers)
    for trial in range(12):
        n = int(rng.choice([4, 5]))
        a = (rng.random((n, n)) < 0.3).astype(np.float32)
        np.fill_diagonal(a, 0.0)
        reach = reachable(a, layers)
        for source in range(n):
            got = influenced(net, torch.as_tensor(a), source, seed=trial)
            want = set(np.flatnonzero(reach[source]).tolist())
            assert got == want, f"graph {a.astype(int).tolist()}, L={layers}, source={source}"


def test_graphs_in_a_batch_do_not_leak_into_each_other():
    """G = 2 graphs: changing graph 0's agent never moves graph 1's Q-values."""
    net = make_net(layers=2)
    n = 3
    adj = torch.ones(2, n, n) - torch.eye(n)
    obs = torch.randn(2, n, OBS_DIM)
    hidden = net.initial_hidden(2, n)
    with torch.no_grad():
        q0, _ = net(obs, adj, hidden)
        obs2 = obs.clone()
        obs2[0, 2] += 5.0
        q1, _ = net(obs2, adj, hidden)
    assert torch.equal(q0[1], q1[1])
    assert (q1[0] - q0[0]).abs().max() > CHANGE_TOL


# -- recurrence ----------------------------------------------------------------------------------


def test_unroll_equals_forward_stepped_with_hidden_carried():
    net = make_net(layers=2)
    b, t, n = 3, 4, 4
    torch.manual_seed(1)
    obs = torch.randn(b, t, n, OBS_DIM)
    adj = torch.bernoulli(torch.full((b, t, n, n), 0.5))
    with torch.no_grad():
        unrolled = net.unroll(obs, adj)
        hidden = net.initial_hidden(b, n)
        stepped = []
        for step in range(t):
            q, hidden = net(obs[:, step], adj[:, step], hidden)
            stepped.append(q)
        stepped = torch.stack(stepped, dim=1)
    assert torch.allclose(unrolled, stepped, atol=1e-5, rtol=0)
    # the hidden state is really carried: round 2 with a fresh hidden state differs
    with torch.no_grad():
        fresh, _ = net(obs[:, 1], adj[:, 1], net.initial_hidden(b, n))
    assert not torch.allclose(fresh, unrolled[:, 1], atol=1e-4)


def test_earlier_round_influences_later_rounds_through_the_gru():
    """A change of agent 0's round-0 observation moves its own later Q-values (memory), while
    a round-1 change never reaches round 0 (causality)."""
    net = make_net(layers=2)
    b, t, n = 1, 3, 3
    obs = torch.randn(b, t, n, OBS_DIM)
    adj = torch.zeros(b, t, n, n)
    with torch.no_grad():
        q0 = net.unroll(obs, adj)
        early = obs.clone()
        early[0, 0, 0] += 3.0
        q_early = net.unroll(early, adj)
        late = obs.clone()
        late[0, 1, 0] += 3.0
        q_late = net.unroll(late, adj)
    assert (q_early[0, 2, 0] - q0[0, 2, 0]).abs().max() > CHANGE_TOL
    assert torch.equal(q_early[0, :, 1:], q0[0, :, 1:])  # no edges: other agents untouched
    assert torch.equal(q_late[0, 0], q0[0, 0])


# -- weight sharing ------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [3, 5])
def test_permuting_agents_permutes_q_values(n):
    net = make_net(layers=2)
    gen = torch.Generator().manual_seed(n)
    obs = torch.randn(2, n, OBS_DIM, generator=gen)
    adj = torch.bernoulli(torch.full((2, n, n), 0.5), generator=gen) * (1 - torch.eye(n))
    hidden = torch.randn(2, n, HIDDEN, generator=gen)
    with torch.no_grad():
        q, z = net(obs, adj, hidden)
        for perm in itertools.islice(itertools.permutations(range(n)), 1, 8):
            p = torch.tensor(perm)
            q_p, z_p = net(obs[:, p], adj[:, p][:, :, p], hidden[:, p])
            assert torch.allclose(q_p, q[:, p], atol=1e-5), perm
            assert torch.allclose(z_p, z[:, p], atol=1e-5), perm


def test_permuting_agents_permutes_unrolled_q_values():
    net = make_net(layers=2)
    n = 4
    obs = torch.randn(2, 3, n, OBS_DIM)
    adj = torch.bernoulli(torch.full((2, 3, n, n), 0.5)) * (1 - torch.eye(n))
    p = torch.tensor([2, 0, 3, 1])
    with torch.no_grad():
        q = net.unroll(obs, adj)
        q_p = net.unroll(obs[:, :, p], adj[:, :, p][:, :, :, p])
    assert torch.allclose(q_p, q[:, :, p], atol=1e-5)


# -- mixer -----------------------------------------------------------------------------------------


def test_mixer_matches_the_qmix_formula():
    torch.manual_seed(3)
    n, s, e = 3, 5, 4
    mixer = QMixer(n, s, embed_dim=e, hypernet_dim=6)
    qs, states = torch.randn(7, n), torch.randn(7, s)
    with torch.no_grad():
        out = mixer(qs, states)
        for k in range(7):
            w1 = mixer.hyper_w1(states[k]).abs().view(n, e)
            b1 = mixer.hyper_b1(states[k])
            w2 = mixer.hyper_w2(states[k]).abs()
            b2 = mixer.hyper_b2(states[k])
            want = torch.nn.functional.elu(qs[k] @ w1 + b1) @ w2 + b2
            assert torch.allclose(out[k], want.squeeze(), atol=1e-5)


def test_mixer_hypernetworks_are_relu_mlps_of_the_papers_width():
    """W1, W2 and V(s) come from MLPs with one ReLU hidden layer; by default 64 hidden units and
    embedding width 64, as in the paper."""
    torch.manual_seed(4)
    n, s = 3, 5
    mixer = QMixer(n, s)
    assert mixer.embed_dim == 64
    states = torch.randn(10, s)
    with torch.no_grad():
        for net, width in ((mixer.hyper_w1, n * 64), (mixer.hyper_w2, 64), (mixer.hyper_b2, 1)):
            hidden, out = [m for m in net if isinstance(m, torch.nn.Linear)]
            assert (hidden.in_features, hidden.out_features, out.out_features) == (s, 64, width)
            pre = states @ hidden.weight.T + hidden.bias
            assert (pre < 0).any()  # the ReLU cuts some units off
            torch.testing.assert_close(net(states), torch.relu(pre) @ out.weight.T + out.bias)


def test_make_mixer_names_the_known_mixers():
    assert isinstance(make_mixer("vdn", 3, 5, 8, 8), VDNMixer) and isinstance(make_mixer("none", 3, 5, 8, 8), IndependentQ)
    with pytest.raises(ValueError, match=r"mixer='qtran': must be one of \['qmix', 'vdn', 'none'\]"):
        make_mixer("qtran", 3, 5, 8, 8)


@pytest.mark.parametrize("scale", [1.0, 10.0, 1e3])
def test_mixer_monotone_in_every_agent_q(scale):
    """dQ_tot/dQ_i >= 0 for random states and agent Q-values (autograd)."""
    torch.manual_seed(int(scale))
    n, s = 4, 6
    for trial in range(5):
        mixer = QMixer(n, s, embed_dim=8, hypernet_dim=16)
        qs = (scale * torch.randn(256, n)).requires_grad_(True)
        states = scale * torch.randn(256, s)
        grad, = torch.autograd.grad(mixer(qs, states).sum(), qs)
        assert torch.isfinite(grad).all()
        assert (grad >= 0).all(), grad.min()
        assert (grad > 0).any()  # not trivially zero


def test_mixer_monotone_at_extreme_inputs():
    torch.manual_seed(5)
    n, s = 3, 4
    mixer = QMixer(n, s, embed_dim=8, hypernet_dim=8)
    big = torch.tensor([1e6, -1e6, 0.0, 1e-8, -1e-8])
    qs = torch.cartesian_prod(big, big, big).requires_grad_(True)  # (125, 3)
    for states in (torch.zeros(len(qs), s), 1e4 * torch.randn(len(qs), s), -1e4 * torch.ones(len(qs), s)):
        out = mixer(qs, states)
        grad, = torch.autograd.grad(out.sum(), qs)
        assert torch.isfinite(out).all() and torch.isfinite(grad).all()
        assert (grad >= 0).all()


def test_mixer_raising_one_agent_q_never_lowers_q_tot():
    torch.manual_seed(6)
    n, s = 3, 5
    mixer = QMixer(n, s, embed_dim=8, hypernet_dim=8)
    qs, states = torch.randn(500, n), torch.randn(500, s)
    with torch.no_grad():
        base = mixer(qs, states)
        for i in range(n):
            up = qs.clone()
            up[:, i] += torch.rand(500) * 5
            assert (mixer(up, states) >= base - 1e-6).all()


# -- dense message passing against torch_geometric's edge list --------------------------------------


@pytest.mark.parametrize("graphs,n,p_edge,self_loops", [(96, 3, 0.5, False), (1, 3, 1.0, False),
                                                         (16, 5, 0.7, True), (4, 8, 0.9, True)])
def test_dense_gated_graph_conv_matches_the_edge_list_path(graphs, n, p_edge, self_loops):
    """DenseGatedGraphConv gives exactly GatedGraphConv's outputs on the listed edges of the same
    graphs (empty graphs, self-loops and up to 8 senders per node included). Gradients (inputs
    and every parameter) are bitwise equal on 3-agent graphs without self-loops, the env's (a
    node has at most two senders and two receivers, so no order of summing them can round
    differently), and equal to float rounding otherwise."""
    torch.manual_seed(0)
    dense = DenseGatedGraphConv(HIDDEN, num_layers=2, aggr="add")
    listed = GatedGraphConv(HIDDEN, num_layers=2, aggr="add")
    listed.load_state_dict(dense.state_dict())
    a = (torch.rand(graphs, n, n) < p_edge).float()
    if not self_loops:
        a = a * (1.0 - torch.eye(n))
    if graphs > 1:
        a[0] = 0.0
    x = torch.randn(graphs, n, HIDDEN)
    x_dense, x_listed = x.clone().requires_grad_(), x.reshape(-1, HIDDEN).clone().requires_grad_()
    edge_index, _ = dense_to_sparse(a)  # row 0 = sender u, row 1 = receiver v, in (g, u, v) order
    out_dense = dense(x_dense, a)
    out_listed = GatedGraphConv.forward(listed, x_listed, edge_index)
    assert torch.equal(out_dense, out_listed)
    weights = torch.randn_like(out_listed)
    (out_dense * weights).sum().backward()
    (out_listed * weights).sum().backward()
    grads = [(x_dense.grad.reshape(-1, HIDDEN), x_listed.grad, "x")] + [
        (p_dense.grad, p_listed.grad, name)
        for (name, p_dense), p_listed in zip(dense.named_parameters(), listed.parameters())]
    for got, expected, name in grads:
        if n == 3 and not self_loops:
            assert torch.equal(got, expected), name
        else:
            torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6, msg=name)


def test_dense_gated_graph_conv_sends_along_edge_direction():
    """A single edge 0 -> 2 changes node 2's output and no other node's."""
    torch.manual_seed(0)
    conv = DenseGatedGraphConv(HIDDEN, num_layers=1, aggr="add")
    x = torch.randn(1, 3, HIDDEN)
    with torch.no_grad():
        alone = conv(x, torch.zeros(1, 3, 3))
        linked = conv(x, adjacency(3, [(0, 2)])[None])
    changed = (linked - alone).abs().amax(dim=-1) > CHANGE_TOL
    assert changed.tolist() == [False, False, True]


def test_dense_gated_graph_conv_names_a_bad_feature_width():
    conv = DenseGatedGraphConv(HIDDEN, num_layers=1, aggr="add")
    with pytest.raises(ValueError, match=f"{HIDDEN + 1} channels, expected {HIDDEN}"):
        conv(torch.randn(2, 3, HIDDEN + 1), torch.zeros(2, 3, 3))
