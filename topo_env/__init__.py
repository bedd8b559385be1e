"""topomarl's topology environment: LLM agents choose how they communicate, round by round."""
from topo_env.actions import ACTION_NAMES, N_ACTIONS, CommAction
from topo_env.config import ConfigError, EnvConfig
from topo_env.engine import RoundSpec, TeamEpisode
from topo_env.env import TopologyParallelEnv, parallel_env
from topo_env.graph import build_adjacency, density, execution_plan
from topo_env.orchestrator import OrchestratorEnv, orchestrator_env
from topo_env.tasks import Task

__all__ = [
    "ACTION_NAMES", "N_ACTIONS", "CommAction", "ConfigError", "EnvConfig", "OrchestratorEnv", "RoundSpec", "Task",
    "TeamEpisode", "TopologyParallelEnv", "build_adjacency", "density", "execution_plan", "orchestrator_env",
    "parallel_env",
]
