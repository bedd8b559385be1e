"""The agent Q-network of Agent Q-Mix (paper Eqs. 2, 3, 9, 10), shared by all agents.

    x_i --Linear--> h_i^(0) --L x [message passing along the graph + GRU cell]--> h_i^(L)
        --GRUCell over rounds (z_0 = 0)--> z_i --MLP--> Q_i(., a) for the 6 actions

With ``dueling=True`` the MLP ends in two streams (Wang et al., 2016): a value V_i(z) shared
by all actions and advantages A_i(z, a), Q = V + A - mean_a A. The value stream learns what
the task is worth (difficulty moves the reward far more than any action does) from every
action's data, so the advantages only have to carry the small differences between actions.

Message passing uses torch_geometric's ``GatedGraphConv``: at each layer a node v sums
``W h_u`` over the agents u whose output it receives (edges u -> v, i.e. ``A[u, v] = 1``,
the direction messages travel; the reference aggregates against it) and updates
``h_v`` with a GRU cell. The edge set is every ordered pair of agents, weighted by
``A[u, v]`` (see :func:`weighted_edges`), so shapes never depend on the graph. The graph an
agent sees when choosing round t's action is the previous round's graph (none before round 1),
as in the paper's Algorithm 1.

Shapes: ``G`` graphs (episodes, or episodes x rounds), ``N`` agents, ``D`` obs features,
``H`` hidden units, ``A`` actions. Weights are shared by all agents; an agent's identity
comes from its observation.
"""
from __future__ import annotations

import torch
from torch import nn
from torch_geometric.nn import GatedGraphConv


def weighted_edges(adjacency: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(G, N, N) 0/1 adjacency -> (edge index (2, G*N*N), edge weight (G*N*N,)) over the G*N
    nodes of the batch (node g*N + u): every ordered pair (u, v) of each graph, in (g, u, v)
    order, weighted by ``A[u, v]``. Row 0 is the sender u, row 1 the receiver v.

    Weighting the complete edge set instead of listing the nonzero entries gives the same sums
    (an absent edge adds exactly 0, and present edges keep their order), and shapes that do not
    depend on the graph: no host sync on ``nonzero`` and nothing for ``torch.compile`` to re-trace.
    """
    g, n = adjacency.shape[0], adjacency.shape[-1]
    pairs = torch.arange(n * n, device=adjacency.device)
    offsets = torch.arange(g, device=adjacency.device).repeat_interleave(n * n) * n
    senders = offsets + (pairs // n).repeat(g)
    receivers = offsets + (pairs % n).repeat(g)
    return torch.stack([senders, receivers]), adjacency.reshape(-1)


class DuelingHead(nn.Module):
    """(..., H) -> (..., A): Q = V + A - mean over actions of A."""

    def __init__(self, hidden_dim: int, n_actions: int):
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(hidden_dim, hidden_dim), nn.ReLU())
        self.value = nn.Linear(hidden_dim, 1)
        self.advantage = nn.Linear(hidden_dim, n_actions)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        x = self.trunk(z)
        adv = self.advantage(x)
        return self.value(x) + adv - adv.mean(dim=-1, keepdim=True)


class AgentQNetwork(nn.Module):
    """GNN-GRU-MLP Q-network. ``forward`` handles one round for G graphs at once;
    :meth:`unroll` runs whole episodes (GNN batched over all rounds, GRU over time)."""

    def __init__(self, obs_dim: int, n_actions: int = 6, hidden_dim: int = 128, gnn_layers: int = 2,
                 dueling: bool = False):
        super().__init__()
        self.hidden_dim = hidden_dim
        self.encode = nn.Linear(obs_dim, hidden_dim)
        self.gnn = GatedGraphConv(hidden_dim, num_layers=gnn_layers, aggr="add")
        self.rnn = nn.GRUCell(hidden_dim, hidden_dim)
        self.head = DuelingHead(hidden_dim, n_actions) if dueling else nn.Sequential(
            nn.Linear(hidden_dim, hidden_dim), nn.ReLU(), nn.Linear(hidden_dim, n_actions))

    def initial_hidden(self, graphs: int, n_agents: int) -> torch.Tensor:
        """z_0 = 0, shape (G, N, H)."""
        return torch.zeros(graphs, n_agents, self.hidden_dim, device=self.encode.weight.device)

    def embed(self, obs: torch.Tensor, adjacency: torch.Tensor) -> torch.Tensor:
        """Topology-aware node embeddings h^(L): obs (..., N, D), adjacency (..., N, N)
        -> (..., N, H). Leading dims are flattened into one batch of graphs."""
        lead, n = obs.shape[:-2], obs.shape[-2]
        x = torch.relu(self.encode(obs.reshape(-1, obs.shape[-1])))
        edge_index, edge_weight = weighted_edges(adjacency.reshape(-1, n, n).to(x.dtype))
        h = self.gnn(x, edge_index, edge_weight)
        return h.reshape(*lead, n, self.hidden_dim)

    def forward(self, obs: torch.Tensor, adjacency: torch.Tensor, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One round: obs (G, N, D), adjacency (G, N, N), hidden (G, N, H) ->
        (Q-values (G, N, A), new hidden (G, N, H))."""
        g, n = obs.shape[:2]
        h = self.embed(obs, adjacency)
        z = self.rnn(h.reshape(g * n, -1), hidden.reshape(g * n, -1)).reshape(g, n, -1)
        return self.head(z), z

    def unroll(self, obs: torch.Tensor, adjacency: torch.Tensor) -> torch.Tensor:
        """Whole episodes from z_0 = 0: obs (B, T, N, D), adjacency (B, T, N, N) ->
        Q-values (B, T, N, A)."""
        b, t, n = obs.shape[:3]
        h = self.embed(obs, adjacency)  # all rounds in one GNN call
        z = self.initial_hidden(b, n).reshape(b * n, -1)
        zs = []
        for step in range(t):  # recurrence over rounds (T <= a few); batched over episodes and agents
            z = self.rnn(h[:, step].reshape(b * n, -1), z)
            zs.append(z)
        return self.head(torch.stack(zs, dim=1).reshape(b, n, t, -1).transpose(1, 2))
