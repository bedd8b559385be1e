"""Reading and checking configuration: the one :class:`ConfigError`, YAML I/O and the field checks
every typed config dataclass (env, backends, learner, train) validates its keys with.

A check names the key as the user wrote it (``prefix.key=value``) and says what is allowed; it
never shows an API key (:func:`public_dict`).
"""
from __future__ import annotations

import dataclasses
import numbers
import re
from pathlib import Path
from typing import Any

import yaml


class ConfigError(ValueError):
    """A configuration key has a bad value; the message names the key and the value."""


class _YAMLLoader(yaml.SafeLoader):
    """PyYAML's safe loader, plus YAML 1.2 floats without a dot (``1e-3``), which YAML 1.1
    (and so plain PyYAML) reads as strings."""


_YAMLLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
    list("-+0123456789."),
)


def parse_yaml(text: str) -> Any:
    """Parse YAML text (safe: plain data only); ``1e-3`` is a float, as in YAML 1.2."""
    return yaml.load(text, Loader=_YAMLLoader)


def read_text_file(path: str | Path, what: str, remedy: str, error: type[ConfigError] = ConfigError) -> str:
    """The text of the UTF-8 file ``path`` (``what`` it is, e.g. "config file"). A missing, unreadable,
    non-UTF-8 (binary or damaged) or blank file is one line of ``error`` naming the file, what is
    wrong and ``remedy`` (what to do)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise error(f"{path}: {what} does not exist; {remedy}") from None
    except UnicodeDecodeError as err:
        raise error(f"{path}: {what} is not UTF-8 text (binary or damaged at byte {err.start}); {remedy}") from None
    except OSError as err:
        raise error(f"{path}: {what} cannot be read ({err.strerror or type(err).__name__}); {remedy}") from None
    if not text.strip():
        raise error(f"{path}: {what} is empty; {remedy}")
    return text


def read_yaml_file(path: str | Path, what: str, remedy: str) -> Any:
    """The data of the YAML file ``path`` (:func:`parse_yaml`), as :func:`read_text_file` reads it; a
    file that is not valid YAML (truncated or damaged) or holds only comments is a one-line
    ConfigError naming the file, the line and ``remedy``."""
    text = read_text_file(path, what, remedy)
    try:
        data = parse_yaml(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        line = f" at line {mark.line + 1}" if mark is not None else ""
        why = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise ConfigError(f"{path}: {what} is not valid YAML{line} (truncated or damaged: {why}); {remedy}") from None
    if data is None:
        raise ConfigError(f"{path}: {what} is empty (comments only); {remedy}")
    return data


CONFIG_REMEDY = "fix it, or give another YAML config (the shipped ones are in configs/)"


def load_yaml(path: str | Path) -> dict[str, Any]:
    """Read a YAML config file into a dict; a missing, empty, truncated or damaged file, or one that
    does not hold a mapping, is a one-line ConfigError naming the file (:func:`read_yaml_file`)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file {str(path)!r} does not exist; give the path of a YAML config (the shipped ones "
                          "are in configs/)")
    data = read_yaml_file(path, "config file", CONFIG_REMEDY)
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: config file holds a YAML {type(data).__name__}, not a mapping; {CONFIG_REMEDY}")
    return data


def public_dict(config: Any) -> Any:
    """A backend config (or its mapping) as a dict with ``kind`` first and without ``api_key``:
    what files, messages and resumed runs see (they take the key from ``OPENAI_API_KEY`` again)."""
    if dataclasses.is_dataclass(config) and not isinstance(config, type):
        config = dataclasses.asdict(config)
    if not isinstance(config, dict):
        return config
    ordered = {"kind": config["kind"]} if "kind" in config else {}
    ordered.update((k, v) for k, v in config.items() if k not in ("kind", "api_key"))
    return ordered


def is_int(value: Any) -> bool:
    """An integer that is not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _name(prefix: str, key: str) -> str:
    return f"{prefix}.{key}" if prefix else key


def check_int(cfg: Any, key: str, minimum: int, prefix: str = "") -> None:
    """``cfg.key`` must be an integer >= ``minimum``; stored as a plain int (frozen dataclasses too)."""
    v = getattr(cfg, key)
    if not is_int(v) or v < minimum:
        raise ConfigError(f"{_name(prefix, key)}={v!r}: must be an integer >= {minimum}")
    object.__setattr__(cfg, key, int(v))


def check_number(cfg: Any, key: str, low: float, high: float | None = None, open_low: bool = False,
                 prefix: str = "", finite: bool = True) -> None:
    """``cfg.key`` must be a real number >= ``low`` (> with ``open_low``) and <= ``high`` when
    given, and finite unless ``finite=False`` (then +inf passes, e.g. "no limit"); stored as a float."""
    v = getattr(cfg, key)
    ok = isinstance(v, numbers.Real) and not isinstance(v, bool) and v == v and (v != float("inf") or not finite)
    if ok:
        ok = (v > low if open_low else v >= low) and (high is None or v <= high)
    if not ok:
        bound = f"{'>' if open_low else '>='} {low}" + (f" and <= {high}" if high is not None else "")
        raise ConfigError(f"{_name(prefix, key)}={v!r}: must be a {'finite ' if finite else ''}number {bound}")
    object.__setattr__(cfg, key, float(v))


def check_choice(cfg: Any, key: str, options: tuple, prefix: str = "") -> None:
    """``cfg.key`` must be one of ``options``."""
    v = getattr(cfg, key)
    if v not in options:
        raise ConfigError(f"{_name(prefix, key)}={v!r}: must be one of {list(options)}")


def as_tuple(key: str, value: Any) -> tuple:
    """A YAML list (or any non-string iterable) as a tuple; ConfigError naming ``key`` otherwise."""
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise ConfigError(f"{key}={value!r}: must be a list")
    return tuple(value)
