"""Scripts that served one study each (seed selection, rescoring, deviation gains, adaptation headroom).

Research only: run them from the repository root with ``python -m experiments.<script>``. The product
(topo_env, agents_llm, controllers, learners, studies, train_qmix.py) never imports this package, and these
scripts use only the product's public names.
"""
