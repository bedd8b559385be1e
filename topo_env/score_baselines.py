"""Moved to :mod:`topo_env.references.baselines_cli` (``python -m topo_env.references.baselines_cli``);
this alias of the old path goes in the next release."""
import sys

from topo_env.engine.cli import run_main
from topo_env.references import baselines_cli as _moved

if __name__ == "__main__":
    sys.exit(run_main(_moved.main, _moved.PROG))
sys.modules[__name__] = _moved
