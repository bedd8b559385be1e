"""The references every controller is scored against, on top of the front-ends: the fixed
baselines (:mod:`.baselines`, scored by ``python -m topo_env.references.baselines_cli``), the
open-loop oracle yardsticks, an exhaustive search over joint action sequences (:mod:`.oracle`,
``python -m topo_env.references.oracle_cli``), and the headroom: how much a privileged adaptive
controller gains over the best fixed sequence (:mod:`.headroom`)."""
