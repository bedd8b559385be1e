"""The ground floor: the episode engine. A round is a :class:`RoundSpec` (who talks to whom, who
runs, who is verified); :class:`TeamEpisode` plays rounds through the executor (SCC layers of
the round's graph, concurrent calls), asks the decision node and scores the reward. It knows
tasks, roles, the team-backend protocol and its registry, never a front-end's vocabulary and never
a backend package: everything above imports it, it imports nothing above.
"""
from topo_env.engine.episode import RewardConfig, RoundSpec, TeamEpisode

__all__ = ["RewardConfig", "RoundSpec", "TeamEpisode"]
