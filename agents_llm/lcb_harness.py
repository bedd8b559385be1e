"""The LiveCodeBench test harness: runs a candidate against a task's test cases, inside the sandbox.

:mod:`agents_llm.hf_loaders` makes a task's ``tests`` from this file's text, preceded by one data line,
``HARNESS_CONFIG = {...}`` (a literal dict: ``stdin_cases`` and ``functional_cases`` as ``(index in the task's
case list, input, output)``, ``func_name``, ``per_case_timeout_s``, ``call_prelude``, and ``worker_source``,
the text of :mod:`agents_llm.lcb_functional_worker`); :func:`agents_llm.scoring.build_test_program` puts
``CANDIDATE_SOURCE = <the candidate's code>`` before that. The sandbox runs the result as ``main.py``, where no
installed package is guaranteed: this file imports the standard library only, and has no ``__future__``
import (one must come first in a file, and here the data lines do).

Stdin cases run the candidate as ``candidate.py`` in a child process; functional cases run in one worker
process (:mod:`agents_llm.lcb_functional_worker`). Each case (and loading the candidate) gets
``per_case_timeout_s`` of wall time. The harness stops at the first failing case, prints one line per passed
case, and exits 0 when every case passed, 1 on a failure (said on stderr), 2 when the task has no case
(``UNSUPPORTED``) and 3 when ``CANDIDATE_SOURCE`` or ``HARNESS_CONFIG`` is missing. The candidate only ever
runs in child processes, so its ``sys.exit(0)``, ``os._exit`` or prints cannot end the harness with a pass.

Importing this module does nothing.
"""
import json
import os
import select
import subprocess
import sys
import tempfile
import time

PASSED, FAILED, UNSUPPORTED, NOT_BUILT = 0, 1, 2, 3


def _norm(text):
    return [line.strip() for line in text.strip().splitlines()]


def _stdin_case(stdin, expected, timeout_s):
    """None when the candidate program maps ``stdin`` to ``expected``, else why not."""
    try:
        proc = subprocess.run([sys.executable, "candidate.py"], input=stdin, capture_output=True, text=True,
                              timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return f"timeout after {timeout_s} s"
    if proc.returncode != 0:
        return f"exit status {proc.returncode}\n{proc.stderr[-2000:]}"
    if _norm(proc.stdout) != _norm(expected):
        return f"wrong output\nexpected: {expected[:500]!r}\ngot: {proc.stdout[:500]!r}"
    return None


def _worker_gone(proc, err, what):
    proc.wait()
    err.seek(0)
    tail = err.read()[-1500:].decode("utf-8", "replace").rstrip()
    return f"the worker process exited (status {proc.returncode}) {what}" + (f"\n{tail}" if tail else "")


def _follow_worker(proc, fd, err, config, passed):
    """Read the worker's reports, enforcing the time limits; print each passed case.
    Returns None when every case passed, else (case index or None, reason)."""
    timeout_s = config["per_case_timeout_s"]
    buffer = b""
    index = None  # the running case (its index in the task's case list); None while loading
    deadline = time.monotonic() + timeout_s
    while True:
        while b"\n" not in buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                what = f"timeout after {timeout_s} s"
                return index, (what if index is not None else "loading the candidate: " + what)
            ready, _, _ = select.select([fd], [], [], min(remaining, 0.5))
            if not ready:
                if proc.poll() is None or select.select([fd], [], [], 0)[0]:
                    continue
                chunk = b""  # exited, pipe kept open by a child of its own: nothing more will come
            else:
                chunk = os.read(fd, 65536)
            if not chunk:
                what = "while loading the candidate" if index is None else "during the case"
                return index, _worker_gone(proc, err, what)
            buffer += chunk
        line, buffer = buffer.split(b"\n", 1)
        try:
            message = json.loads(line)
            event = message["event"]
        except (ValueError, KeyError, TypeError):
            return index, f"malformed report from the worker: {line[:200]!r}"
        if event == "load_error":
            return None, "could not load the candidate:\n" + message["detail"]
        if event == "start":
            index = config["functional_cases"][message["case"]][0]
        elif event == "result":
            if message["status"] != "pass":
                return index, message["detail"]
            print(f"case {index} (functional): passed in {message['seconds']:.3f} s", flush=True)
            passed.append(index)
        elif event == "done":
            return None
        deadline = time.monotonic() + timeout_s


def _functional_cases(source, config, passed):
    job = json.dumps({"source": source, "func_name": config["func_name"], "prelude": config["call_prelude"],
                      "cases": [[inp, out] for _, inp, out in config["functional_cases"]]}).encode("utf-8")
    read_fd, write_fd = os.pipe()
    with tempfile.TemporaryFile() as err:
        try:
            proc = subprocess.Popen([sys.executable, "-c", config["worker_source"], str(write_fd)],
                                    stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=err,
                                    pass_fds=(write_fd,))
        finally:
            os.close(write_fd)
        try:
            try:
                proc.stdin.write(job)
                proc.stdin.close()
            except BrokenPipeError:
                pass  # the worker died at start: its reports end, which says so
            return _follow_worker(proc, read_fd, err, config, passed)
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            os.close(read_fd)


def run_cases(source, config):
    """Run every case of ``config`` on the candidate ``source``; the exit status (see the module docstring)."""
    stdin_cases, functional_cases = config["stdin_cases"], config["functional_cases"]
    total = len(stdin_cases) + len(functional_cases)
    if not total:
        print("UNSUPPORTED: this problem has no test case to run", file=sys.stderr)
        return UNSUPPORTED
    passed = []
    failure = None
    if stdin_cases:
        with open("candidate.py", "w", encoding="utf-8") as fh:
            fh.write(source)
        for index, stdin, expected in stdin_cases:
            start = time.monotonic()
            reason = _stdin_case(stdin, expected, config["per_case_timeout_s"])
            if reason is not None:
                failure = (index, "stdin", reason)
                break
            print(f"case {index} (stdin): passed in {time.monotonic() - start:.3f} s", flush=True)
            passed.append(index)
    if failure is None and functional_cases:
        result = _functional_cases(source, config, passed)
        if result is not None:
            failure = (result[0], "functional", result[1])
    if failure is not None:
        index, kind, reason = failure
        where = f"case {index} ({kind})" if index is not None else f"{kind} cases"
        print(f"{where}: {reason}", file=sys.stderr)
        print(f"FAILED: {where}; {len(passed)} of {total} case(s) passed before it", file=sys.stderr)
        return FAILED
    print(f"passed {total} case(s)")
    return PASSED


def main(program_globals):
    """Run the program's cases on its candidate; both come from the data lines before this file's text."""
    missing = [name for name in ("CANDIDATE_SOURCE", "HARNESS_CONFIG") if name not in program_globals]
    if missing:
        print(f"harness error: {' and '.join(missing)} not defined; build the program with "
              "agents_llm.scoring.build_test_program", file=sys.stderr)
        return NOT_BUILT
    return run_cases(program_globals["CANDIDATE_SOURCE"], program_globals["HARNESS_CONFIG"])


if __name__ == "__main__":
    sys.exit(main(globals()))
