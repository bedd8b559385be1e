"""Files a user hands in or names, read and made with one-line errors: a JSON file a run wrote
(:func:`read_json_file`), an output folder (:func:`output_dir`), and a file written so that a kill
or a full disk never leaves half of it behind (:func:`write_atomically`)."""
from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

from topo_env.engine.config_checks import ConfigError


def read_json_file(path: str | Path, what: str, remedy: str, keys: Sequence[str] = ()) -> dict[str, Any]:
    """The JSON object in ``path`` (``what`` it is, e.g. "the run's results.json"), holding every
    top-level key of ``keys``. A missing, empty, truncated or non-JSON file, or one without those
    keys, is a one-line ConfigError naming the file, what is wrong and ``remedy`` (what to do)."""
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ConfigError(f"{path}: {what} does not exist; {remedy}") from None
    except (IsADirectoryError, PermissionError, UnicodeDecodeError) as err:
        raise ConfigError(f"{path}: {what} cannot be read ({type(err).__name__}); {remedy}") from None
    if not text.strip():
        raise ConfigError(f"{path}: {what} is empty; {remedy}")
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


__all__ = ["output_dir", "read_json_file", "write_atomically", "write_text_atomically"]
