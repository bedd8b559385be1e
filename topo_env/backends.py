"""Team backends by name: the ``env.backend`` section of a config, and the registry that builds
the backend it names.

A backend is a ``kind`` (``"sim"``, ``"llm"``, or one added with :func:`register_backend`), a
frozen config dataclass holding that kind's keys, and a factory ``factory(env_config) ->
TeamBackend``. The factory is imported lazily, on the first :func:`make_backend` of its kind, so
``import topo_env`` never imports the LLM stack (openai, datasets).

YAML: ``backend: sim`` (a string means ``{kind: <string>}``) or a mapping::

    backend:
      kind: llm
      model: gpt-4o-mini                  # LLMBackendConfig: the keys below
      base_url: http://127.0.0.1:8080/v1
      dataset: humaneval                  # or a JSONL path (schema in agents_llm.tasks)
      train_size: 15

Adding a backend::

    @dataclass(frozen=True)
    class EchoBackendConfig:
        kind: str = "echo"
        def check(self, env): ...        # optional: cross-key checks against the EnvConfig

    register_backend("echo", "mypackage.echo:EchoTeam.from_config", EchoBackendConfig)
    topo_env.parallel_env(backend={"kind": "echo"})
"""
from __future__ import annotations

import dataclasses
import importlib
import numbers
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Union

from topo_env.config import ConfigError, public_dict
from topo_env.sim.profiles import get_profile

if TYPE_CHECKING:
    from topo_env.backend import TeamBackend
    from topo_env.config import EnvConfig

Factory = Union[str, Callable[["EnvConfig"], "TeamBackend"]]
"""A callable ``factory(env_config) -> TeamBackend``, or its ``"package.module:qualified.name"``
(imported on first use)."""


class BackendUnavailable(RuntimeError):
    """A backend cannot serve at all (e.g. no LLM server listening); the message is one line that
    names the address and says what to do."""


class BackendFailed(RuntimeError):
    """A backend call failed for good mid-run (a server that went down, past its retries): the
    episode in flight cannot finish. Runs checkpoint what completed and say how to resume."""


@dataclass(frozen=True)
class SimBackendConfig:
    """``backend: sim``: the calibrated simulated team of ``env.profile`` (no network, no keys)."""

    kind: str = "sim"

    def check(self, env: EnvConfig) -> None:
        """``env.domain``, when given, must be the profile's domain."""
        profile = get_profile(env.profile)
        if env.domain is not None and env.domain != profile.domain:
            raise ConfigError(f"domain={env.domain!r} does not match profile {env.profile!r} (domain "
                              f"{profile.domain!r}); leave domain out with backend kind 'sim'")


@dataclass(frozen=True, kw_only=True)
class LLMSettings:
    """Where and how to call an OpenAI-compatible chat server (OpenAI, vLLM, Ollama, llama.cpp).

    ``base_url`` / ``api_key`` default to ``OPENAI_BASE_URL`` / ``OPENAI_API_KEY``; the key is
    best left to the variable and is never written out (:meth:`public_dict`). Sampling:
    ``temperature``, ``top_p``, ``max_tokens`` (completion), ``seed`` (sent when not None).
    Robustness: ``timeout_s`` per call, ``max_retries``, ``backoff_s`` (first wait, doubled each
    retry, with jitter), ``max_concurrency`` (calls in flight). ``cache_path``: sqlite response
    cache, None to turn caching off.
    """

    model: str
    base_url: str | None = None
    api_key: str | None = field(default=None, repr=False)
    temperature: float = 0.7
    top_p: float = 1.0
    max_tokens: int = 512
    seed: int | None = None
    timeout_s: float = 60.0
    max_retries: int = 4
    backoff_s: float = 0.5
    max_concurrency: int = 8
    cache_path: str | None = ".cache/llm_responses.sqlite"

    def __post_init__(self) -> None:
        if not isinstance(self.model, str) or not self.model:
            raise ConfigError(f"backend.model={self.model!r}: must be a non-empty model name")
        for key in ("base_url", "api_key", "cache_path"):
            value = getattr(self, key)
            if value is not None and (not isinstance(value, str) or not value):
                shown = "***" if key == "api_key" else repr(value)
                raise ConfigError(f"backend.{key}={shown}: must be a non-empty string or null")
        for key, low in (("temperature", 0.0), ("top_p", 0.0)):
            _check_number(self, key, low, open_low=False)
        for key in ("timeout_s", "backoff_s"):
            _check_number(self, key, 0.0, open_low=True)
        for key, low in (("max_tokens", 1), ("max_concurrency", 1), ("max_retries", 0)):
            _check_int(self, key, low)
        if self.seed is not None:
            _check_int(self, "seed", 0)

    def resolved_base_url(self) -> str:
        return self.base_url or os.environ.get("OPENAI_BASE_URL") or "https://api.openai.com/v1"

    def sampling(self) -> dict[str, Any]:
        params = {"temperature": self.temperature, "top_p": self.top_p, "max_tokens": self.max_tokens}
        if self.seed is not None:
            params["seed"] = self.seed
        return params


@dataclass(frozen=True, kw_only=True)
class LLMBackendConfig(LLMSettings):
    """``backend: {kind: llm, ...}``: real LLM agents (:class:`agents_llm.team.LLMTeamBackend`).

    The :class:`LLMSettings` keys, plus ``dataset`` (``"humaneval"`` or the path of a JSONL task
    file, schema in :mod:`agents_llm.tasks`) and ``train_size`` (tasks of the train split; the
    rest are held out). Needs ``env.domain``.
    """

    kind: str = "llm"
    dataset: str
    train_size: int = 15

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.dataset, str) or not self.dataset:
            raise ConfigError(f"backend.dataset={self.dataset!r}: must be 'humaneval' or the path of a JSONL task file")
        _check_int(self, "train_size", 0)

    def check(self, env: EnvConfig) -> None:
        """An LLM team solves one domain: ``env.domain`` must be given."""
        from topo_env.tasks import DOMAINS

        if env.domain is None:
            raise ConfigError(f"backend kind 'llm' needs env.domain: one of {list(DOMAINS)}")


@dataclass(frozen=True)
class _Entry:
    factory: Factory
    config_cls: type


_REGISTRY: dict[str, _Entry] = {
    "sim": _Entry("topo_env.sim.team:SimTeamBackend.from_config", SimBackendConfig),
    "llm": _Entry("agents_llm.team:LLMTeamBackend.from_config", LLMBackendConfig),
}
"""kind -> factory and config class. Module state by design: it is the one place plug-ins add to,
through :func:`register_backend`; nothing else writes it."""


def register_backend(kind: str, factory: Factory, config_cls: type, replace: bool = False) -> None:
    """Make ``kind`` a backend: ``env.backend: {kind: <kind>, ...}`` then builds ``config_cls``
    from the other keys (validated there) and :func:`make_backend` calls ``factory(env_config)``.

    ``config_cls``: a frozen dataclass whose ``kind`` field defaults to ``kind``; an optional
    ``check(env_config)`` method validates it against the rest of the env config. A kind that is
    already registered raises ValueError unless ``replace``."""
    if not isinstance(kind, str) or not kind.isidentifier():
        raise ValueError(f"backend kind {kind!r}: must be an identifier-like string")
    if kind in _REGISTRY and not replace:
        raise ValueError(f"backend kind {kind!r} is already registered; pass replace=True to override it")
    if not (dataclasses.is_dataclass(config_cls) and isinstance(config_cls, type)):
        raise ValueError(f"config_cls={config_cls!r}: must be a dataclass")
    defaults = {f.name: f.default for f in dataclasses.fields(config_cls)}
    if defaults.get("kind") != kind:
        raise ValueError(f"{config_cls.__name__} needs a field kind: str = {kind!r}")
    if not (callable(factory) or (isinstance(factory, str) and ":" in factory)):
        raise ValueError(f"factory={factory!r}: must be a callable or 'package.module:name'")
    _REGISTRY[kind] = _Entry(factory, config_cls)


def backend_kinds() -> tuple[str, ...]:
    """The registered backend kinds, sorted."""
    return tuple(sorted(_REGISTRY))


def backend_config(value: Any) -> Any:
    """The backend config a YAML/keyword value names: a string ``kind``, a mapping ``{kind: ...,
    <keys>}``, or an already built config of a registered kind. ConfigError naming the bad value
    otherwise (the API key is never shown)."""
    if isinstance(value, str):
        if value not in _REGISTRY:
            raise ConfigError(f"backend={value!r}: no such backend; known kinds: {list(backend_kinds())}")
        value = {"kind": value}
    if not isinstance(value, dict):
        for entry in _REGISTRY.values():
            if type(value) is entry.config_cls:
                return value
        raise ConfigError(f"backend={public_dict(value)!r}: must be a backend kind {list(backend_kinds())} "
                          "or a mapping {kind: ..., <that kind's keys>}")
    kind = value.get("kind")
    if kind not in _REGISTRY:
        raise ConfigError(f"backend.kind={kind!r}: no such backend; known kinds: {list(backend_kinds())} "
                          "(write backend: {kind: sim} or backend: {kind: llm, model: ..., dataset: ...})")
    cls = _REGISTRY[kind].config_cls
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(value) - set(fields))
    if unknown:
        raise ConfigError(f"backend kind {kind!r} has no key(s) {unknown}; its keys: {sorted(fields)}")
    missing = sorted(name for name, f in fields.items() if name not in value and f.default is dataclasses.MISSING
                     and f.default_factory is dataclasses.MISSING)
    if missing:
        raise ConfigError(f"backend kind {kind!r} needs {', '.join(f'backend.{m}' for m in missing)} "
                          f"(got {sorted(public_dict(value))})")
    return cls(**value)


def make_backend(config: EnvConfig) -> TeamBackend:
    """The team backend ``config.backend`` names, built by its registered factory."""
    entry = _REGISTRY.get(config.backend.kind)
    if entry is None:
        raise ConfigError(f"backend.kind={config.backend.kind!r}: no such backend; known kinds: "
                          f"{list(backend_kinds())}")
    factory = _resolve(entry.factory) if isinstance(entry.factory, str) else entry.factory
    return factory(config)


def sibling_backend(backend: TeamBackend, config: EnvConfig) -> TeamBackend:
    """A backend for another episode in flight next to ``backend``'s: ``backend.sibling()`` where
    the backend has one (an LLM team: a new team sharing the same client, so all episodes share
    one connection pool and ``max_concurrency``), else a fresh :func:`make_backend` of ``config``."""
    make = getattr(backend, "sibling", None)
    return make() if callable(make) else make_backend(config)


def _resolve(path: str) -> Callable:
    module_name, _, qualname = path.partition(":")
    target: Any = importlib.import_module(module_name)
    for part in qualname.split("."):
        target = getattr(target, part)
    return target


def _check_int(cfg: Any, key: str, minimum: int) -> None:
    v = getattr(cfg, key)
    if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < minimum:
        raise ConfigError(f"backend.{key}={v!r}: must be an integer >= {minimum}")
    object.__setattr__(cfg, key, int(v))


def _check_number(cfg: Any, key: str, low: float, open_low: bool) -> None:
    v = getattr(cfg, key)
    ok = isinstance(v, numbers.Real) and not isinstance(v, bool) and v == v and v != float("inf")
    if not ok or (v <= low if open_low else v < low):
        raise ConfigError(f"backend.{key}={v!r}: must be a finite number {'>' if open_low else '>='} {low}")
    object.__setattr__(cfg, key, float(v))


__all__ = [
    "BackendFailed", "BackendUnavailable", "LLMBackendConfig", "LLMSettings", "SimBackendConfig", "backend_config", "backend_kinds",
    "make_backend", "public_dict", "register_backend", "sibling_backend",
]
