"""The front-ends: the PettingZoo ``ParallelEnv`` (six CommActions per agent ->
:class:`~topo_env.engine.RoundSpec`, :mod:`.parallel_env`, with its vocabulary in
:mod:`.comm_actions`, :mod:`.comm_graph`, :mod:`.targets`; batched in :mod:`.vector_env`) and the
Gymnasium orchestrator env for central controllers (:mod:`.orchestrator_env`). Both read
:class:`~.env_config.EnvConfig`, observe through :mod:`.observation` / :mod:`.encoders` and draw
with :mod:`.plots`. They import the engine and the backends' configs, nothing above.
"""
