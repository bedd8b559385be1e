"""Files a user hands in or names, read and made with one-line errors: a JSON file a run wrote
(:func:`read_json_file`), a JSON-lines file line by line (:func:`json_lines`), an output folder
(:func:`output_dir`), an earlier run's outputs moved aside (:func:`set_aside`), and a file written so
that a kill or a full disk never leaves half of it behind (:func:`write_atomically`)."""
from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any

from topo_env.engine.config_checks import ConfigError, read_text_file


def read_json_file(path: str | Path, what: str, remedy: str, keys: Sequence[str] = ()) -> dict[str, Any]:
    """The JSON object in ``path`` (``what`` it is, e.g. "the run's results.json"), holding every
    top-level key of ``keys``. A missing, empty, truncated or non-JSON file, or one without those
    keys, is a one-line ConfigError naming the file, what is wrong and ``remedy`` (what to do)."""
    path = Path(path)
    text = read_text_file(path, what, remedy)  # missing, unreadable, not UTF-8 or empty: one line
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise ConfigError(f"{path}: {what} is not valid JSON (truncated or damaged: {err.msg}, line {err.lineno}); "
                          f"{remedy}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: {what} holds a JSON {type(data).__name__}, not an object; {remedy}")
    missing = [key for key in keys if key not in data]
    if missing:
        raise ConfigError(f"{path}: {what} lacks {missing} (incomplete, or from another program); {remedy}")
    return data


def json_lines(path: str | Path, error: type[Exception] = ValueError) -> Iterator[tuple[int, Any]]:
    """(line number, the line's JSON value) for each non-blank line of the JSON-lines file ``path``; a line
    that is not UTF-8 or not JSON raises ``error`` naming ``path:line``."""
    with Path(path).open("rb") as fh:  # decoded line by line: a damaged line is named by its number
        for number, raw in enumerate(fh, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise error(f"{path}:{number}: not UTF-8 text (binary or damaged)") from None
            if not line.strip():
                continue
            try:
                value = json.loads(line)
            except json.JSONDecodeError as err:
                raise error(f"{path}:{number}: not JSON ({err.msg} at column {err.colno})") from None
            yield number, value


def output_dir(path: str | Path, flag: str = "--out") -> Path:
    """``path`` as an output folder, made with its parents where missing. A path that is a file,
    lies under a file, or cannot be made or written is a one-line ConfigError naming ``flag``."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise ConfigError(f"{flag} {str(path)!r} is a file, not a folder; give a folder for the run's files")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:  # a file on the way (NotADirectoryError, FileExistsError), no permission, read-only
        raise ConfigError(f"{flag} {str(path)!r}: cannot make the folder ({err.strerror or err}); "
                          "give a folder you can write") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise ConfigError(f"{flag} {str(path)!r}: the folder is not writable; give a folder you can write")
    return path


def set_aside(out: Path, names: Sequence[str]) -> Path | None:
    """Move what of ``names`` (files or folders in ``out``) exists into ``out/earlier/<UTC
    time>/`` (a new folder, also for two runs within a second): an earlier run's outputs that a
    new run makes anew, neither lost nor looking current. Returns that folder, or None where none
    of ``names`` exists."""
    found = [name for name in names if (out / name).exists()]
    if not found:
        return None
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    aside = out / "earlier" / stamp
    for n in range(1, 1000):
        if not aside.exists():
            break
        aside = out / "earlier" / f"{stamp}-{n}"
    aside.mkdir(parents=True)
    for name in found:
        (out / name).rename(aside / name)
    return aside


def write_atomically(path: str | Path, write: Callable[[IO[bytes]], Any]) -> None:
    """Write ``path`` through ``write(file)`` into a temporary file beside it, flushed and
    fsynced, then renamed over ``path`` (and the folder fsynced): ``path`` is either its old
    content or the whole new one, even after a kill or a power loss. Any failure (a full disk,
    an exception in ``write``) removes the temporary file and re-raises; ``path`` is untouched."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    with contextlib.suppress(OSError):  # the rename itself made durable; not every filesystem allows it
        folder = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(folder)
        finally:
            os.close(folder)


def write_text_atomically(path: str | Path, text: str) -> None:
    """:func:`write_atomically` for a text file (UTF-8)."""
    write_atomically(path, lambda fh: fh.write(text.encode()))


__all__ = ["json_lines", "output_dir", "read_json_file", "set_aside", "write_atomically", "write_text_atomically"]
