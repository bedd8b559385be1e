"""The worker that runs a LiveCodeBench candidate's functional (call-based) test cases.

:mod:`agents_llm.lcb_harness` starts it inside the sandbox as ``python -c <this file's text> REPORT_FD``
(the text travels inside the harness program, so the worker needs no installed package there) and writes
the job to its stdin as one JSON object: ``source`` (the candidate), ``func_name``, ``prelude``
(LiveCodeBench's imports) and ``cases`` (``[input, output]`` pairs in LiveCodeBench's JSON lines). The
worker reports JSON lines on REPORT_FD: ``{"event": "load_error" | "loaded" | "start" | "result" | "done",
...}``; the harness enforces the time limits and decides. It stops at the first case that does not pass.

It imports the standard library only; importing this module does nothing.
"""
from __future__ import annotations

import json
import os
import sys
import time
import traceback
import types
from typing import Any


def _short(value: Any, limit: int = 300) -> str:
    try:
        text = value if isinstance(value, str) else repr(value)
    except BaseException as exc:  # e.g. an int too large to print
        text = f"<{type(value).__name__} that cannot be shown: {type(exc).__name__}>"
    return text if len(text) <= limit else text[: limit // 2] + " ...(truncated)... " + text[-limit // 2:]


def _describe(exc: BaseException) -> str:
    lines = traceback.format_exception(type(exc), exc, exc.__traceback__)
    return "".join(lines)[-1500:].rstrip()


def run_job(job: dict[str, Any], send) -> None:
    """Load the candidate as module ``tmp_sol`` (not ``__main__``: a main guard does not run) after the
    prelude, then call it on every case, reporting each step through ``send(**message)``. The callable is
    ``Solution().<func_name>`` when the source contains ``class Solution``, else the top-level function."""
    source, func_name = job["source"], job["func_name"]
    module = types.ModuleType("tmp_sol")
    try:
        exec(compile(job["prelude"], "<livecodebench prelude>", "exec"), module.__dict__)
        exec(compile(source, "candidate.py", "exec"), module.__dict__)
        target = module.Solution() if "class Solution" in source else module
    except BaseException as exc:
        send(event="load_error", detail=_describe(exc))
        return
    method = getattr(target, func_name, None)
    if not callable(method):
        where = "class Solution" if target is not module else "the candidate (top level)"
        send(event="load_error", detail=f"{where} defines no callable {func_name!r}")
        return
    send(event="loaded")
    for position, (raw_input, raw_output) in enumerate(job["cases"]):
        args = [json.loads(line) for line in raw_input.split("\n")]
        expected = json.loads(raw_output)
        send(event="start", case=position)
        start = time.perf_counter()
        try:
            prediction = method(*args)
        except BaseException as exc:
            send(event="result", case=position, status="error", seconds=time.perf_counter() - start,
                 detail=_describe(exc))
            return
        seconds = time.perf_counter() - start
        if isinstance(prediction, tuple):  # LiveCodeBench: a tuple counts as a list (top level only)
            prediction = list(prediction)
        try:
            same = bool(prediction == expected)
        except BaseException as exc:
            send(event="result", case=position, status="error", seconds=seconds,
                 detail="comparing the result failed: " + _describe(exc))
            return
        if not same:
            send(event="result", case=position, status="wrong", seconds=seconds,
                 detail=f"wrong answer\nexpected: {_short(raw_output)}\ngot: {_short(prediction)}")
            return
        send(event="result", case=position, status="pass", seconds=seconds)
    send(event="done")


def main(argv: list[str]) -> None:
    report = os.fdopen(int(argv[0]), "w", encoding="utf-8", buffering=1)

    def send(**message: Any) -> None:
        report.write(json.dumps(message) + "\n")
        report.flush()

    job = json.loads(sys.stdin.read())
    sys.stdin = open(os.devnull, encoding="utf-8")  # the candidate's input() sees end of file
    run_job(job, send)


if __name__ == "__main__":
    main(sys.argv[1:])
