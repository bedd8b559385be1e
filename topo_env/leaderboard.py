"""Moved to :mod:`studies.leaderboard` (``python -m studies.leaderboard``); this alias of the old path goes in the
next release."""
import sys

from topo_env.engine.cli import run_main
from studies import leaderboard as _moved

if __name__ == "__main__":
    sys.exit(run_main(_moved.main, _moved.PROG))
sys.modules[__name__] = _moved
