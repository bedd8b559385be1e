"""Scripts that served one study each (seed selection, rescoring, deviation gains, adaptation headroom).

Research only: run them from the repository root with ``python -m experiments.<script>``. The product
(topo_env, learners, agents_llm, train_qmix.py, robustness.py) never imports this package, and these
scripts use only the product's public names.
"""
