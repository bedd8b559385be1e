"""Run ``train_qmix.py`` with a signal sent to itself when the run reaches a stage (the tests of
interrupted runs): ``python tests/interrupted_run.py STAGE SIGNAL -- ARGS...``. STAGE is one of
:data:`STAGES` (the function that stage calls first, as learners.training names it, and which of
its calls), SIGNAL ``SIGINT`` or ``SIGKILL``. The teacher's search is kept small (test_teacher's)."""
from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

STAGES = {  # stage: (function in learners.training, the call that is interrupted: its arguments' test)
    "teacher": ("imitate_teacher", lambda *a, **k: True),
    "training": ("learn", lambda run, first, *a, **k: first == 32),  # the third batch of 16
    "validation": ("evaluate_policy", lambda *a, seed=None, split=None, **k: split == "train"),
    "evaluation": ("evaluate_held_out", lambda *a, **k: True),
}
SMALL_SEARCH = {"samples": 300, "rerank_samples": 600}


def interrupt_at(stage: str, signum: int, patch=setattr) -> None:
    """Patch (with ``patch``, e.g. a pytest monkeypatch's setattr) learners.training so that
    ``stage``'s call sends ``signum`` to this process before it runs (for the validation: the
    second validation check, the first being the teacher's student's); and keep the teacher's
    search small."""
    import learners.training as training
    from topo_env.references import headroom
    patch(headroom, "REFERENCE_SELECTION", {**headroom.REFERENCE_SELECTION, **SMALL_SEARCH})
    name, matches = STAGES[stage]
    original, seen, wanted = getattr(training, name), [], 2 if stage == "validation" else 1

    def patched(*args, **kwargs):
        if matches(*args, **kwargs):
            seen.append(1)
            if len(seen) == wanted:
                os.kill(os.getpid(), signum)
        return original(*args, **kwargs)

    patch(training, name, patched)


if __name__ == "__main__":
    stage, signame, _, *argv = sys.argv[1:]
    interrupt_at(stage, getattr(signal, signame))
    import train_qmix
    sys.exit(train_qmix.run_main(lambda: train_qmix.main(argv), train_qmix.PROG))
