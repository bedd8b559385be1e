"""A training run in a child process: :func:`start_child` runs :func:`run_logged` (that is,
:func:`learners.training.train_and_evaluate`) in a spawned process, so torch's threads and the
training's memory stay apart from the caller's, and a child killed by a signal (e.g. out of memory)
takes nothing else down; :func:`child_status` reads how it ended, and :func:`train_in_child` does
both for one run (the QMIX controller and experiments/transfer.py use it; the seeds runner starts
several children at once)."""
from __future__ import annotations

import contextlib
import dataclasses
import multiprocessing
import signal
import sys
import threading
import traceback
from multiprocessing.process import BaseProcess
from pathlib import Path

from tqdm import tqdm

from learners.config import ExperimentConfig
from learners.training import RunOptions, resumed_config, train_and_evaluate
from topo_env.engine.backend_registry import BackendFailed, BackendUnavailable
from topo_env.engine.cli import RunError
from topo_env.engine.config_checks import ConfigError

SPAWN = multiprocessing.get_context("spawn")
"""Children are spawned (a fresh interpreter: no forked torch threads or CUDA state)."""


def train_in_child(cfg: ExperimentConfig, out_dir: str | Path, options: RunOptions = RunOptions(),
                   log: str | Path | None = None) -> int:
    """:func:`train_and_evaluate` in a child process; its output goes to ``log`` (None: the
    caller's streams). Returns its status (:func:`child_status`): 0 done, :data:`STOPPED`, 2 a
    one-line error (in ``log``), 1 a crash, or -N where signal N killed it (``log`` says so)."""
    return child_status(start_child(cfg, out_dir, options, log), log)


def start_child(cfg: ExperimentConfig, out_dir: str | Path, options: RunOptions = RunOptions(),
                log: str | Path | None = None, resume: bool = False) -> BaseProcess:
    """:func:`run_logged` in a spawned child process, started (not waited for). The process is
    named ``train <out_dir>`` (what :func:`multiprocessing.active_children` lists); its exit code
    is run_logged's status, read with :func:`child_status`."""
    process = SPAWN.Process(target=_child_main, args=(cfg, out_dir, options, log, resume), name=f"train {out_dir}")
    process.start()
    return process


def _child_main(*args) -> None:
    """What a child runs: :func:`run_logged`, its status the process's exit code."""
    tqdm.set_lock(threading.RLock())  # not tqdm's default cross-process semaphore, which a killed child would leak
    sys.exit(run_logged(*args))


def child_status(process: BaseProcess, log: str | Path | None = None,
                 next_step: str = "its last checkpoint stands") -> int:
    """Wait for a child of :func:`start_child` and return its status: run_logged's, or -N where
    signal N killed it (e.g. SIGKILL when the system ran out of memory); then one line is appended
    to ``log`` saying so (:func:`killed_by`), followed by ``next_step``."""
    process.join()
    code = process.exitcode
    if code < 0 and log is not None:
        memory = ": the system may have run out of memory" if -code == signal.SIGKILL else ""
        with open(log, "a") as stream:
            print(f"{killed_by(code)}{memory}; {next_step}", file=stream)
    return code


def killed_by(code: int) -> str:
    """A negative exit code in words: ``killed by signal SIGKILL (9)``."""
    try:
        return f"killed by signal {signal.Signals(-code).name} ({-code})"
    except ValueError:  # a number without a name
        return f"killed by signal {-code}"


def run_logged(cfg: ExperimentConfig, out_dir: str | Path, options: RunOptions, log: str | Path | None,
               resume: bool = False) -> int:
    """:func:`train_and_evaluate` with its output in ``log`` (None: as it is; line-buffered, so a
    killed run's log holds all it printed) and its errors as statuses: a ConfigError, RunError or
    backend error is one line in the log and status 2, any other exception its traceback and
    status 1 (what a child process reports back). ``resume``: continue from ``out_dir``'s
    checkpoint.pt (loaded here), ``cfg`` being that run's effective config with the keys a resumed
    run may change (:data:`learners.training.RESUME_OVERRIDABLE`); the log is appended to."""
    with contextlib.ExitStack() as stack:
        if log is not None:
            stream = stack.enter_context(open(log, "a" if resume else "w", buffering=1))
            stack.enter_context(contextlib.redirect_stdout(stream))
            stack.enter_context(contextlib.redirect_stderr(stream))
        try:
            if resume:
                options = dataclasses.replace(options, checkpoint=resumed_config(out_dir)[1])
            return train_and_evaluate(cfg, out_dir, options)
        except (ConfigError, RunError, BackendUnavailable, BackendFailed) as err:
            print(f"error: {' '.join(str(err).split())}", file=sys.stderr)
            return 2
        except Exception:  # a bug: its traceback where the caller will look
            traceback.print_exc()
            return 1


__all__ = ["child_status", "killed_by", "run_logged", "start_child", "train_in_child"]
