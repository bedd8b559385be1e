"""Topology controllers on the orchestrator env, one module each (see :mod:`controllers.base`)."""
