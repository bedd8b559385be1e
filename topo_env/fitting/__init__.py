"""Fitting a simulated team to a real one's traces (:mod:`.fit`, ``python -m topo_env.fitting.fit``):
exploration recording (:mod:`.explore`), the statistics and updates of the fit, its check against
the traces' fixed topologies and its report. It sits on the references (the fixed baselines it
checks with) and writes profiles the simulated backend reads."""
