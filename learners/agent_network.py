"""The agent Q-network of Agent Q-Mix (paper Eqs. 2, 3, 9, 10), shared by all agents.

    x_i --Linear--> h_i^(0) --L x [message passing along the graph + GRU cell]--> h_i^(L)
        --GRUCell over rounds (z_0 = 0)--> z_i --MLP--> Q_i(., a) for the 6 actions

With ``dueling=True`` the MLP ends in two streams (Wang et al., 2016): a value V_i(z) shared
by all actions and advantages A_i(z, a), Q = V + A - mean_a A. The value stream learns what
the task is worth (difficulty moves the reward far more than any action does) from every
action's data, so the advantages only have to carry the small differences between actions.

Message passing is torch_geometric's ``GatedGraphConv`` (its parameters, initialisation and
GRU update) run on dense graphs, the way torch_geometric's own ``Dense*Conv`` layers run on
batches of small graphs (see :class:`learners.graph_conv.DenseGatedGraphConv`): at each layer a node v sums
``W h_u`` over the agents u whose output it receives (edges u -> v, i.e. ``A[u, v] = 1``,
the direction messages travel; the reference aggregates against it) and updates ``h_v`` with
a GRU cell. Shapes never depend on the graph. The graph an agent sees when choosing round t's
action is the previous round's graph (none before round 1), as in the paper's Algorithm 1.

Shapes: ``G`` graphs (episodes, or episodes x rounds), ``N`` agents, ``D`` obs features,
``H`` hidden units, ``A`` actions. Weights are shared by all agents; an agent's identity
comes from its observation.

``gnn=False`` (``qmix.gnn``, the ablation) drops the message passing: h_i^(0) goes straight
to the GRU, so an agent's Q depends on its own observation only.
"""
from __future__ import annotations

import torch
from torch import nn


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
                 dueling: bool = False, gnn: bool = True):
        super().__init__()
        self.hidden_dim = hidden_dim
        self.encode = nn.Linear(obs_dim, hidden_dim)
        self.gnn = None
        if gnn:
            # imported here: torch_geometric takes seconds to import (it loads transformers), and a
            # program that stops at a config error or never builds a network should not pay for it
            from learners.graph_conv import DenseGatedGraphConv
            self.gnn = DenseGatedGraphConv(hidden_dim, num_layers=gnn_layers, aggr="add")
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
        if self.gnn is None:
            return x.reshape(*lead, n, self.hidden_dim)
        h = self.gnn(x.view(-1, n, self.hidden_dim), adjacency.reshape(-1, n, n))
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


def build_agent_network(obs_dim: int, n_actions: int, config) -> AgentQNetwork:
    """The agent network of a :class:`learners.config.QMIXConfig` (``hidden_dim``,
    ``gnn_layers``, ``dueling``, ``gnn``): the one place that maps the config to the network."""
    return AgentQNetwork(obs_dim, n_actions, config.hidden_dim, config.gnn_layers, config.dueling, config.gnn)
