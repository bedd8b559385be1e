"""A worker process that checks math answers with math-verify: ``python -m agents_llm.math_verify_worker``.

:mod:`agents_llm.scoring` starts it and kills it when a check runs over its time limit (math-verify's own
``signal.alarm`` timeouts are off, so the parent may call from any thread). Protocol, one JSON object per line:
the worker first writes ``{"ready": true}`` (after a warm-up check) or ``{"ready": false, "error": ...}`` when
math-verify cannot be imported; then for every request ``{"gold": ..., "pred": ...}`` read from stdin it writes
``{"ok": true, "result": bool}`` or ``{"ok": false, "error": ...}``. Anything the libraries print goes to stderr,
never into the protocol. On Linux the worker dies with its parent.

Importing this module does nothing.
"""
from __future__ import annotations

import json
import logging
import os
import signal
import sys
from typing import TextIO

PR_SET_PDEATHSIG = 1
WARM_UP = ("\\boxed{\\frac{1}{2}}", "$0.5$")  # lazy imports and grammar loading happen on the first check


def _die_with_parent() -> None:
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    except (ImportError, OSError, AttributeError):  # not Linux: the parent kills the worker at exit instead
        pass


def _protocol_stream() -> TextIO:
    """A line-buffered copy of stdout for the protocol; stdout itself then points at stderr."""
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    return proto


def serve(requests: TextIO, proto: TextIO) -> None:
    """Answer every request line on ``requests`` (see the module docstring)."""
    try:
        from math_verify import parse, verify

        verify(parse(WARM_UP[0], parsing_timeout=None), parse(WARM_UP[1], parsing_timeout=None),
               timeout_seconds=None)
    except Exception as exc:  # math-verify missing or broken: the parent falls back to numbers
        proto.write(json.dumps({"ready": False, "error": repr(exc)}) + "\n")
        return
    proto.write(json.dumps({"ready": True}) + "\n")
    for line in requests:
        try:
            request = json.loads(line)
            gold = parse(request["gold"], parsing_timeout=None)
            pred = parse(request["pred"], parsing_timeout=None)
            reply = {"ok": True, "result": bool(gold) and bool(pred) and bool(verify(gold, pred, timeout_seconds=None))}
        except BaseException as exc:
            reply = {"ok": False, "error": repr(exc)[:500]}
        proto.write(json.dumps(reply) + "\n")


def main() -> None:
    _die_with_parent()
    logging.disable(logging.CRITICAL)  # math-verify logs its parse failures: keep them out of the worker's stderr
    serve(sys.stdin, _protocol_stream())


if __name__ == "__main__":
    main()
