"""A training run in a child process: :func:`train_in_child` runs
:func:`learners.training.train_and_evaluate` in a spawned process, so torch's threads and the
training's memory stay apart from the caller's (the seeds runner and the QMIX controller use it);
:func:`run_logged` is what the child runs, its output in a log and its errors as statuses."""
from __future__ import annotations

import contextlib
import multiprocessing
import sys
import traceback
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

from learners.config import ExperimentConfig
from learners.training import RunOptions, train_and_evaluate
from topo_env.engine.backend_registry import BackendFailed, BackendUnavailable
from topo_env.engine.cli import RunError
from topo_env.engine.config_checks import ConfigError


def train_in_child(cfg: ExperimentConfig, out_dir: str | Path, options: RunOptions = RunOptions(),
                   log: str | Path | None = None) -> int:
    """:func:`train_and_evaluate` in a child process (spawned: torch's threads and the training's
    memory stay apart from the caller's); its output goes to ``log`` (None: the caller's streams).
    Returns its status: 0 done, :data:`STOPPED`, 2 a one-line error (in ``log``), 1 a crash."""
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return child_status(pool.submit(run_logged, cfg, out_dir, options, log))


def child_status(future: Future) -> int:
    """The status :func:`run_logged` returned in a child process, or 1 where the child died (a
    signal, e.g. out of memory) before it could return one."""
    try:
        return future.result()
    except BrokenProcessPool:
        return 1


def run_logged(cfg: ExperimentConfig, out_dir: str | Path, options: RunOptions, log: str | Path | None) -> int:
    """:func:`train_and_evaluate` with its output in ``log`` (None: as it is) and its errors as
    statuses: a ConfigError, RunError or backend error is one line in the log and status 2, any
    other exception its traceback and status 1 (what a child process reports back)."""
    with contextlib.ExitStack() as stack:
        if log is not None:
            stream = stack.enter_context(open(log, "w"))
            stack.enter_context(contextlib.redirect_stdout(stream))
            stack.enter_context(contextlib.redirect_stderr(stream))
        try:
            return train_and_evaluate(cfg, out_dir, options)
        except (ConfigError, RunError, BackendUnavailable, BackendFailed) as err:
            print(f"error: {' '.join(str(err).split())}", file=sys.stderr)
            return 2
        except Exception:  # a bug: its traceback where the caller will look
            traceback.print_exc()
            return 1



__all__ = ["child_status", "run_logged", "train_in_child"]
