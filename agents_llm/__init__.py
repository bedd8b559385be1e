"""Real LLM teams: the env's ``llm`` backend (``env.backend: {kind: llm, model: ..., base_url: ...,
dataset: ...}``, :class:`agents_llm.config.LLMBackendConfig`), beside the simulated team (``sim``).

Each agent call is one chat completion on any OpenAI-compatible server (OpenAI, vLLM, Ollama,
llama.cpp; :mod:`agents_llm.local_server` starts a local one), behind the same
:class:`topo_env.engine.team_backend.TeamBackend` interface (:class:`agents_llm.team.LLMTeamBackend`):
client, cache, role prompts, decision node, task loaders, scorers, sandbox and the probe.
"""
