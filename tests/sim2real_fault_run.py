"""A small sim-to-real run with a signal sent to itself when it reaches a stage (the tests of
interrupted runs, tests/test_sim2real_faults.py): ``python tests/sim2real_fault_run.py STAGE
SIGNAL -- ARGS...`` runs ``train_qmix.py ARGS`` (``--sim2real``) with :func:`speed_up` and
:func:`interrupt_at`. STAGE is one of :data:`STAGES`, SIGNAL ``SIGINT`` or ``SIGKILL``."""
from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

STAGES = {  # stage: (module, function, its call that is interrupted: an argument test)
    "record": ("studies.sim2real", "record_exploration", lambda *a, seed, **k: seed % 1_000_003 == 2),  # chunk 2
    "fit": ("studies.sim2real", "fit_traces", lambda *a, **k: True),
    "train": ("learners.training", "learn", lambda run, first, *a: run.out_dir.name == "sim_run" and first == 0),
    "train-evaluation": ("learners.training", "evaluate_held_out", lambda run, **k: run.out_dir.name == "sim_run"),
    "finetune": ("learners.training", "learn", lambda run, first, *a: run.out_dir.name == "finetune" and first == 3),
    "evaluate": ("studies.sim2real", "held_out_comparison", lambda *a, **k: True),
}
RECORD_CHUNK = 8
"""Episodes per recorded chunk: a few chunks within the tests' budget."""


def speed_up(patch=setattr) -> None:
    """Small chunks, and the fit's check and the fitted team's predictions on few episodes (the
    same in every run of the tests, so their results compare)."""
    from studies import sim2real
    fit, predict = sim2real.fit_traces, sim2real.predicted_vs_measured
    patch(sim2real, "RECORD_CHUNK", RECORD_CHUNK)
    patch(sim2real, "fit_traces", lambda traces, base, **kwargs: fit(traces, base, **{**kwargs, "check": False}))
    patch(sim2real, "predicted_vs_measured", lambda real, fitted, measured: predict(real, fitted, measured, 400))


def interrupt_at(stage: str, signum: int, patch=setattr) -> None:
    """Patch (with ``patch``, e.g. a pytest monkeypatch's setattr) ``stage``'s function so that its
    matching call sends ``signum`` to this process: before it runs, or for the recording, once it
    recorded half of its chunk (which a rerun must take up after that half)."""
    import importlib
    module, name, matches = STAGES[stage]
    module = importlib.import_module(module)
    original = getattr(module, name)

    def patched(*args, **kwargs):
        if not matches(*args, **kwargs):
            return original(*args, **kwargs)
        if stage == "record":
            env, path, episodes = args
            original(env, path, episodes // 2, **kwargs)
        os.kill(os.getpid(), signum)
        return original(*args, **kwargs)

    patch(module, name, patched)


if __name__ == "__main__":
    stage, signame, _, *argv = sys.argv[1:]
    speed_up()
    interrupt_at(stage, getattr(signal, signame))
    import train_qmix
    sys.exit(train_qmix.run_main(lambda: train_qmix.main(argv), train_qmix.PROG))
