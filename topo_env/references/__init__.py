"""The references every controller is scored against, on top of the front-ends: the fixed
baselines (:mod:`.baselines`, scored by ``python -m topo_env.references.baselines_cli``), the
per-subject oracle (:mod:`.oracle`) and the headroom between them (:mod:`.headroom`)."""
