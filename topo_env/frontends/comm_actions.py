"""The six communication actions of Agent Q-Mix (paper Section 4.1)."""
from __future__ import annotations

from enum import IntEnum


class CommAction(IntEnum):
    """One agent's communication choice for one round.

    Each action only decides the agent's edges in the round's graph (see
    :func:`topo_env.frontends.comm_graph.build_adjacency`); what the agents say is up to them.
    """

    SOLO_PROCESS = 0
    BROADCAST_ALL = 1
    SELECTIVE_QUERY = 2
    AGGREGATE_REFINE = 3
    EXECUTE_VERIFY = 4
    DEBATE_CHECK = 5


N_ACTIONS: int = len(CommAction)
ACTION_NAMES: tuple[str, ...] = tuple(a.name.lower() for a in CommAction)
"""Lower-case action names in index order: ``ACTION_NAMES[2] == "selective_query"``."""
