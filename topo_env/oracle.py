"""Moved to :mod:`topo_env.references.oracle_cli` (``python -m topo_env.references.oracle_cli``); this alias of the old path goes in the
next release."""
import sys

from topo_env.references import oracle_cli as _moved

if __name__ == "__main__":
    sys.exit(_moved.main())
sys.modules[__name__] = _moved
