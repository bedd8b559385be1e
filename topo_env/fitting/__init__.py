"""Fitting a simulated team to a real one's traces (:mod:`.fit`, ``python -m topo_env.fitting.fit``):
exploration recording (:mod:`.explore`), reading traces (:mod:`.fit_data`), one module per parameter group
the fit estimates (:mod:`.fit_ability`, :mod:`.fit_social` with :mod:`.fit_updates`, :mod:`.fit_decision`,
:mod:`.fit_confidence`, :mod:`.fit_verifier`, :mod:`.fit_tokens`, :mod:`.fit_tasks`), the fitted profile
(:mod:`.fit_result`), the statistics of the fit, its check against the traces' fixed topologies and its
report. It sits on the references (the fixed baselines it
checks with) and writes profiles the simulated backend reads."""
