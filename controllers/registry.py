"""Controllers by name, the way team backends are found (:mod:`topo_env.engine.backend_registry`):
a name maps to the module that builds it, imported on first use, so listing the names never
imports torch, sentence-transformers or an LLM client.

Every controller plays the orchestrator env through :class:`controllers.base.Controller`. Three
kinds of names:

* the fixed baselines (``solo``, ``full``, ...; :data:`topo_env.references.baselines.BASELINES`),
  replayed through :mod:`controllers.per_agent`; nothing to train;
* learned methods (:data:`LEARNED`): a module with ``build(n_agents, rounds, seed, ...)``,
  ``TRAIN_EPISODES`` (its training budget in episodes), ``ENV_ROUNDS`` (rounds it plays; None:
  the profile's) and optionally ``ENV_KEYS`` (env keys it needs, e.g. DyTopo's descriptors);
* LLM-written methods (:data:`LLM_WRITTEN`): a learned method's module whose orchestrator is the
  team's own LLM (only with ``backend: llm``); their orchestrator's tokens count in tokens per task.
"""
from __future__ import annotations

import importlib
from dataclasses import replace
from pathlib import Path
from types import ModuleType
from typing import Any, NamedTuple

from topo_env.engine.backend_registry import LLM_SERVER, backend_offers
from topo_env.engine.config_checks import ConfigError
from topo_env.frontends.env_config import EnvConfig
from topo_env.references.baselines import BASELINES

LEARNED: dict[str, str] = {
    "qmix": "controllers.qmix",
    "dytopo": "controllers.dytopo",
    "agentconductor": "controllers.agentconductor",
    "puppeteer": "controllers.puppeteer",
    "tacomas": "controllers.tacomas",
}
"""Learned method name -> the module that builds it."""
LLM_WRITTEN: dict[str, str] = {"agentconductor_llm": "agentconductor", "tacomas_llm": "tacomas"}
"""LLM-written method name -> the learned method whose module it uses."""
SIMULATED_NAMES: tuple[str, ...] = (*BASELINES, *LEARNED)
"""Every controller that runs on any team."""
ALL_NAMES: tuple[str, ...] = (*SIMULATED_NAMES, *LLM_WRITTEN)
"""Every controller (the LLM-written ones need ``backend: llm``)."""


class BuiltController(NamedTuple):
    """A controller ready to :meth:`~controllers.base.Controller.train` and play: the env config it
    plays (its rounds and keys), its training budget in episodes, and its own orchestrator LLM
    (a :class:`controllers.llm_chat.ChatFunction`, or None)."""

    controller: Any
    env_config: EnvConfig
    train_episodes: int
    orchestrator_llm: Any


def controller_module(name: str) -> ModuleType:
    """The module that builds learned method ``name`` (imported now)."""
    return importlib.import_module(LEARNED[name])


def controller_env(module: ModuleType, config: EnvConfig) -> EnvConfig:
    """``config`` as a method's module asks for it: its ``ENV_ROUNDS`` (None: unchanged) and its
    ``ENV_KEYS``."""
    rounds = getattr(module, "ENV_ROUNDS", None)
    cfg = replace(config, rounds=int(rounds)) if rounds else config
    return replace(cfg, **getattr(module, "ENV_KEYS", {}))


def make_controller(name: str, config: EnvConfig, seed: int, run_dir: Path) -> BuiltController:
    """The controller ``name`` on the team ``config`` describes, seeded; QMIX trains into
    ``run_dir/qmix_seed<seed>``. An unknown name, or an optional extra that is not installed, is a
    one-line ConfigError."""
    if name in BASELINES:
        from controllers.per_agent import build_baseline

        return BuiltController(build_baseline(name, config, seed), config, 0, None)
    if name not in LEARNED and name not in LLM_WRITTEN:
        raise ConfigError(f"controller {name!r}: no such controller; known: {list(ALL_NAMES)}")
    try:
        if name in LLM_WRITTEN:
            return _make_llm_written(name, config, seed)
        module = controller_module(name)
        cfg = controller_env(module, config)
        if name == "qmix":
            controller = module.build(cfg.n_agents, cfg.rounds, seed, env_config=cfg)
            controller.run_dir = run_dir / f"qmix_seed{seed}"
        else:
            controller = module.build(cfg.n_agents, cfg.rounds, seed)
    except ImportError as err:  # an optional extra that is not installed: one line, with its install command
        raise ConfigError(f"method {name!r} cannot run here: {err}") from None
    return BuiltController(controller, cfg, int(module.TRAIN_EPISODES), None)


def _make_llm_written(name: str, config: EnvConfig, seed: int) -> BuiltController:
    """AgentConductor with an LLM writing its YAML, or TacoMAS with a meta-LLM proposing its edits,
    both on the team's own server (:class:`controllers.llm_chat.ChatFunction`); nothing to train."""
    from controllers.llm_chat import ChatFunction

    if not backend_offers(config.backend, LLM_SERVER):
        raise ConfigError(f"method {name!r} prompts the team's LLM: use it with a --config whose env has backend: llm")
    module = controller_module(LLM_WRITTEN[name])
    cfg = controller_env(module, config)
    chat = ChatFunction(cfg.backend)
    if name == "agentconductor_llm":
        controller = module.AgentConductorController(cfg.n_agents, cfg.rounds, seed, write_yaml=chat)
    else:
        controller = module.build(cfg.n_agents, cfg.rounds, seed, propose=chat)
        controller.name = name
    return BuiltController(controller, cfg, 0, chat)
