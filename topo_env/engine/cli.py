"""What every command-line program of the project shares: argument types, ``--set`` overrides,
plain-text tables, the closing note of a run, and the one-line error exit.

A program keeps its ``main(argv) -> int`` raising :class:`~topo_env.engine.config_checks.ConfigError` (so
tests and notebooks can call it) and runs it as ``sys.exit(run_main(main, "python x.py"))``:
a bad config, a missing run directory or an unreachable server then prints one line on stderr
(``<prog>: error: <what is wrong and what to do>``) and exits with status 2, no traceback.
"""
from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from topo_env.engine.backend_registry import BackendFailed, BackendUnavailable
from topo_env.engine.config_checks import ConfigError, parse_yaml

ERROR_STATUS = 2
"""Exit status of a refused input (argparse's)."""
INTERRUPTED_STATUS = 130
"""Exit status of a program stopped by Ctrl-C (as a shell reports SIGINT)."""



class OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line on stderr (no usage block), status 2."""

    def error(self, message: str) -> NoReturn:
        fail(self.prog, f"{message} (see --help)")


def fail(prog: str, message: str) -> NoReturn:
    """Print ``<prog>: error: <message>`` as one line on stderr and exit with status 2."""
    line = " ".join(str(message).split())
    print(f"{prog}: error: {line}", file=sys.stderr)
    sys.exit(ERROR_STATUS)


class RunError(RuntimeError):
    """A run that cannot go on for a reason outside the code (a backend that failed mid-run, a
    full disk); the message says what was saved and how to continue."""


def run_main(main: Callable[[], int], prog: str) -> int:
    """``main()``'s status; a ConfigError, a backend that is unavailable or failed for good, or a
    :class:`RunError` becomes one line on stderr and status 2, a Ctrl-C that ``main`` did not
    handle itself one line and status 130 (other exceptions are bugs and keep their traceback)."""
    try:
        return main()
    except (ConfigError, BackendUnavailable, RunError) as err:
        fail(prog, str(err))
    except BackendFailed as err:
        fail(prog, f"the team's backend failed: {err}")
    except KeyboardInterrupt:  # where a program has no stage of its own to say where it stopped
        print(f"\n{prog}: interrupted (Ctrl-C); what it wrote so far is kept", file=sys.stderr)
        sys.exit(INTERRUPTED_STATUS)


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1 (the error names the value)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be >= 1")
    return value


def parse_set(text: str, sections: Sequence[str]) -> tuple[tuple[str, ...], Any]:
    """``"qmix.lr=1e-3"`` -> (("learner", "lr"), 0.001); ``"env.backend.base_url=http://h/v1"``
    -> (("env", "backend", "base_url"), "http://h/v1"). Keys may nest to any depth below a
    section; values are YAML 1.2 scalars or flow collections. Errors show the key, never the
    value (it may be an API key)."""
    if "=" not in text:
        raise ConfigError(f"--set {text!r}: expected section.key=value (e.g. qmix.lr=1e-3)")
    path, raw = text.split("=", 1)
    keys = tuple(path.split("."))
    if len(keys) < 2 or not all(keys):
        raise ConfigError(f"--set {path!r}=...: the key must be section.key[.subkey] with section in {list(sections)}")
    if keys[0] not in sections:
        raise ConfigError(f"--set {path!r}=...: unknown section {keys[0]!r}; known: {list(sections)}")
    return keys, parse_yaml(raw)


def apply_set(data: dict[str, Any], keys: Sequence[str], value: Any) -> None:
    """Set ``data[k0][k1]...[kn] = value`` in place, creating mappings on the way. A string met on
    the way is a kind shorthand (``backend: llm``) and becomes ``{"kind": <string>}``, so
    ``env.backend.model=...`` refines it; any other non-mapping there is a ConfigError."""
    node = data
    for depth, key in enumerate(keys[:-1]):
        child = node.get(key)
        if child is None:
            child = {}
        elif isinstance(child, str):
            child = {"kind": child}
        elif isinstance(child, dict):
            child = dict(child)
        else:
            where = ".".join(keys[:depth + 1])
            raise ConfigError(f"--set {'.'.join(keys)}=...: {where} is {child!r}, not a mapping")
        node[key] = child
        node = child
    node[keys[-1]] = value


def format_table(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> str:
    """A plain-text table of ``rows`` (dicts) with the given column keys; floats to 4 places."""
    def cell(v: Any) -> str:
        if isinstance(v, float):
            return "nan" if math.isnan(v) else f"{v:.4f}"
        return str(v)

    cells = [[cell(r.get(c, "")) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[j]) for row in cells)) for j, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths)) for row in cells]
    return "\n".join(lines)


def points(fraction: float) -> str:
    """An accuracy (a fraction in [0, 1]) in points, as tables show it: ``0.4567`` -> ``"45.67"``."""
    return f"{100 * fraction:.2f}"


def standard_error_note(column: str) -> str:
    """What the bracketed standard error of ``column`` means (closing notes of the studies)."""
    return (f"{column}: the figure in brackets is the paired standard error of the difference over the same "
            "held-out episodes (each pair shares its task and noise); a difference beyond about 2 SE is unlikely "
            "to be chance.")


def closing_note(scored: str, notes: Iterable[str], written: Iterable[tuple[str, Path | str]]) -> str:
    """The end of a run: what it scored, how to read the table, and every file it wrote
    (``(what, path)`` pairs, one per line)."""
    lines = [f"Scored: {scored}.", *notes, "Wrote:"]
    lines += [f"  {what}: {path}" for what, path in written]
    return "\n".join(lines)


__all__ = [
    "ERROR_STATUS", "OneLineParser", "RunError", "apply_set", "closing_note", "fail", "format_table", "parse_set", "points",
    "positive_int", "run_main", "standard_error_note",
]
