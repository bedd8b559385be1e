"""topomarl's topology environment: LLM agents choose how they communicate, round by round."""
from topo_env.frontends.comm_actions import ACTION_NAMES, N_ACTIONS, CommAction
from topo_env.frontends.env_config import EnvConfig
from topo_env.engine.config_checks import ConfigError
from topo_env.engine.episode import RoundSpec, TeamEpisode
from topo_env.frontends.parallel_env import TopologyParallelEnv, parallel_env
from topo_env.frontends.comm_graph import build_adjacency
from topo_env.engine.plan import density, execution_plan
from topo_env.frontends.orchestrator_env import OrchestratorEnv, orchestrator_env
from topo_env.engine.tasks import Task

__all__ = [
    "ACTION_NAMES", "N_ACTIONS", "CommAction", "ConfigError", "EnvConfig", "OrchestratorEnv", "RoundSpec", "Task",
    "TeamEpisode", "TopologyParallelEnv", "build_adjacency", "density", "execution_plan", "orchestrator_env",
    "parallel_env",
]
