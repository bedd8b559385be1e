"""Team backends by name: the ``env.backend`` section of a config, and the registry that builds
the backend it names.

A backend is a ``kind`` (``"sim"``, ``"llm"``, or one added with :func:`register_backend`), a
frozen config dataclass holding that kind's keys, and a factory ``factory(env_config) ->
TeamBackend``. The factory is imported lazily, on the first :func:`make_backend` of its kind, so
``import topo_env`` never imports the LLM stack (openai, datasets). The kinds' config classes are
found the same way (``topo_env.sim.config``, ``agents_llm.config``): the engine imports no backend.

YAML: ``backend: sim`` (a string means ``{kind: <string>}``) or a mapping::

    backend:
      kind: llm
      model: gpt-4o-mini                  # agents_llm.config.LLMBackendConfig: its keys
      base_url: http://127.0.0.1:8080/v1
      dataset: humaneval                  # or a JSONL path (schema in agents_llm.tasks)
      train_size: 15

What a backend offers beyond playing episodes is a set of capabilities its config class declares
(``capabilities: ClassVar[frozenset[str]]``), read with :func:`backend_offers`; code outside this
registry asks for a capability, never for a kind by name:

- :data:`BATCH_SIMULATOR`: the batch simulator plays this team (training at simulator scale, batched
  greedy evaluation, the headroom references, ``SimVectorEnv``);
- :data:`NAMED_PROFILE`: the team is a named simulated profile (``backend.profile``);
- :data:`LLM_SERVER`: the team calls an OpenAI-compatible server that a controller may prompt too;
  its calls are real LLM calls (the budget that is not free);
- :data:`TASK_LIST`: the held-out tasks are a fixed list, played in order (episode k: task k).

Adding a backend::

    @dataclass(frozen=True)
    class EchoBackendConfig:
        kind: str = "echo"
        capabilities: ClassVar[frozenset[str]] = frozenset({TASK_LIST})   # optional
        def check(self, env): ...        # optional: cross-key checks against the env config

    register_backend("echo", "mypackage.echo:EchoTeam.from_config", EchoBackendConfig)
    topo_env.parallel_env(backend={"kind": "echo"})
"""
from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Union

from topo_env.engine.config_checks import ConfigError, public_dict
from topo_env.engine.team_backend import TeamBackend, TeamSettings

Factory = Union[str, Callable[[TeamSettings], TeamBackend]]
"""A callable ``factory(env_config) -> TeamBackend``, or its ``"package.module:qualified.name"``
(imported on first use)."""


BATCH_SIMULATOR = "batch_simulator"
NAMED_PROFILE = "named_profile"
LLM_SERVER = "llm_server"
TASK_LIST = "task_list"
CAPABILITIES = frozenset({BATCH_SIMULATOR, NAMED_PROFILE, LLM_SERVER, TASK_LIST})
"""The capabilities a backend may offer (module docstring)."""


def backend_offers(backend: Any, capability: str) -> bool:
    """Whether the backend config ``backend`` (an ``env.backend``) offers ``capability`` (one of
    :data:`CAPABILITIES`), as its config class declares in ``capabilities``."""
    if capability not in CAPABILITIES:
        raise ValueError(f"capability={capability!r}: must be one of {sorted(CAPABILITIES)}")
    return capability in getattr(type(backend), "capabilities", frozenset())


class BackendUnavailable(RuntimeError):
    """A backend cannot serve at all (e.g. no LLM server listening); the message is one line that
    names the address and says what to do."""


class BackendFailed(RuntimeError):
    """A backend call failed for good mid-run (a server that went down, past its retries): the
    episode in flight cannot finish. Runs checkpoint what completed and say how to resume."""


@dataclass(frozen=True)
class _Entry:
    factory: Factory
    config_cls: type | str  # the class, or its "package.module:Name" (imported on first use)

    def config_class(self) -> type:
        return _resolve(self.config_cls) if isinstance(self.config_cls, str) else self.config_cls


_REGISTRY: dict[str, _Entry] = {
    "sim": _Entry("topo_env.sim.team:SimTeamBackend.from_config", "topo_env.sim.config:SimBackendConfig"),
    "llm": _Entry("agents_llm.team:LLMTeamBackend.from_config", "agents_llm.config:LLMBackendConfig"),
}
"""kind -> factory and config class. Module state by design: it is the one place plug-ins add to,
through :func:`register_backend`; nothing else writes it."""


def register_backend(kind: str, factory: Factory, config_cls: type, replace: bool = False) -> None:
    """Make ``kind`` a backend: ``env.backend: {kind: <kind>, ...}`` then builds ``config_cls``
    from the other keys (validated there) and :func:`make_backend` calls ``factory(env_config)``.

    ``config_cls``: a frozen dataclass whose ``kind`` field defaults to ``kind``; an optional
    ``check(env_config)`` method validates it against the rest of the env config, and an optional
    ``domain`` attribute names the domain its team solves when ``env.domain`` is left out, an optional
    ``label`` what names the team in run folders and tables, and an optional class attribute
    ``capabilities`` what it offers (:data:`CAPABILITIES`). A kind that is already registered
    raises ValueError unless ``replace``."""
    if not isinstance(kind, str) or not kind.isidentifier():
        raise ValueError(f"backend kind {kind!r}: must be an identifier-like string")
    if kind in _REGISTRY and not replace:
        raise ValueError(f"backend kind {kind!r} is already registered; pass replace=True to override it")
    if not (dataclasses.is_dataclass(config_cls) and isinstance(config_cls, type)):
        raise ValueError(f"config_cls={config_cls!r}: must be a dataclass")
    defaults = {f.name: f.default for f in dataclasses.fields(config_cls)}
    if defaults.get("kind") != kind:
        raise ValueError(f"{config_cls.__name__} needs a field kind: str = {kind!r}")
    unknown = set(getattr(config_cls, "capabilities", frozenset())) - CAPABILITIES
    if unknown:
        raise ValueError(f"{config_cls.__name__}.capabilities {sorted(unknown)}: known ones are {sorted(CAPABILITIES)}")
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
            if type(value) is entry.config_class():
                return value
        raise ConfigError(f"backend={public_dict(value)!r}: must be a backend kind {list(backend_kinds())} "
                          "or a mapping {kind: ..., <that kind's keys>}")
    kind = value.get("kind")
    if kind not in _REGISTRY:
        raise ConfigError(f"backend.kind={kind!r}: no such backend; known kinds: {list(backend_kinds())} "
                          "(write backend: {kind: sim} or backend: {kind: llm, model: ..., dataset: ...})")
    cls = _REGISTRY[kind].config_class()
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


def make_backend(config: TeamSettings) -> TeamBackend:
    """The team backend ``config.backend`` names, built by its registered factory."""
    entry = _REGISTRY.get(config.backend.kind)
    if entry is None:
        raise ConfigError(f"backend.kind={config.backend.kind!r}: no such backend; known kinds: "
                          f"{list(backend_kinds())}")
    factory = _resolve(entry.factory) if isinstance(entry.factory, str) else entry.factory
    return factory(config)


def sibling_backend(backend: TeamBackend, config: TeamSettings) -> TeamBackend:
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


__all__ = [
    "BATCH_SIMULATOR", "CAPABILITIES", "LLM_SERVER", "NAMED_PROFILE", "TASK_LIST", "BackendFailed",
    "BackendUnavailable", "backend_config", "backend_kinds", "backend_offers", "make_backend", "register_backend",
    "sibling_backend",
]
