"""Real LLM teams (role prompts, decision node, OpenAI-compatible backend, task loaders and
scorers). Not built yet: today the env's only backend is the simulated team
(``backend="sim"``); this package will plug in behind the same
:class:`topo_env.engine.team_backend.TeamBackend` interface.
"""
