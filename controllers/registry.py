"""Controllers by name, the way team backends are found (:mod:`topo_env.engine.backend_registry`):
a name maps to the module that builds it, imported on first use, so listing the names never
imports torch, sentence-transformers or an LLM client.

Every controller plays the orchestrator env through :class:`controllers.base.Controller`. Three
kinds of names:

* the fixed baselines (``solo``, ``full``, ...; :data:`topo_env.references.baselines.BASELINES`),
  replayed through :mod:`controllers.per_agent`; nothing to train;
* learned methods (:data:`LEARNED`): a module with ``build(n_agents, rounds, seed, ...)``,
  ``TRAIN_EPISODES`` (its training budget in episodes), ``ENV_ROUNDS`` (rounds it plays; None:
  the profile's) and optionally ``ENV_KEYS`` (env keys it needs, e.g. DyTopo's descriptors) and
  ``BUILD_TAKES_ENV_CONFIG = True`` (its ``build`` is handed the comparison's env config as
  ``env_config``: methods that train on their own env of the same team, QMIX and the central PPO);
* LLM-written methods (:data:`LLM_WRITTEN`): a learned method's module whose orchestrator is the
  team's own LLM (only with ``backend: llm``); their orchestrator's tokens count in tokens per task;
* off-the-shelf library methods (:data:`LIBRARY`, named ``<library>_<algorithm>``): learned methods of
  one module whose ``build`` also takes ``method=`` (the name) and whose ``TRAIN_EPISODES`` is a dict by
  name; on request only, never in the default lists (:data:`ALL_NAMES`): each trains for up to 20
  minutes on 2 cores.
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
    "ppo_central": "controllers.central_ppo",
}
"""Learned method name -> the module that builds it."""
LLM_WRITTEN: dict[str, str] = {"agentconductor_llm": "agentconductor", "tacomas_llm": "tacomas"}
"""LLM-written method name -> the learned method whose module it uses."""
SIMULATED_NAMES: tuple[str, ...] = (*BASELINES, *LEARNED)
"""Every controller that runs on any team."""
ALL_NAMES: tuple[str, ...] = (*SIMULATED_NAMES, *LLM_WRITTEN)
"""Every controller of the default lists (the LLM-written ones need ``backend: llm``)."""
BENCHMARL_ALGORITHMS: tuple[str, ...] = ("mappo", "ippo", "qmix", "vdn", "iql", "masac")
"""BenchMARL's discrete-action algorithms, played with its default hyperparameters (controllers.benchmarl_policy)."""
LIBRARY: dict[str, str] = {f"benchmarl_{a}": "controllers.benchmarl_policy" for a in BENCHMARL_ALGORITHMS}
"""Library method name -> the module that builds it (simulated teams)."""
KNOWN_NAMES: tuple[str, ...] = (*ALL_NAMES, *LIBRARY)
"""Every name :func:`make_controller` builds."""


class BuiltController(NamedTuple):
    """A controller ready to :meth:`~controllers.base.Controller.train` and play: the env config it
    plays (its rounds and keys), its training budget in episodes, and its own orchestrator LLM
    (a :class:`controllers.llm_chat.ChatFunction`, or None)."""

    controller: Any
    env_config: EnvConfig
    train_episodes: int
    orchestrator_llm: Any


def controller_module(name: str) -> ModuleType:
    """The module that builds learned (or library) method ``name`` (imported now)."""
    return importlib.import_module(LEARNED[name] if name in LEARNED else LIBRARY[name])


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
    if name not in KNOWN_NAMES:
        raise ConfigError(f"controller {name!r}: no such controller; known: {list(KNOWN_NAMES)}")
    try:
        if name in LLM_WRITTEN:
            return _make_llm_written(name, config, seed)
        module = controller_module(name)
        cfg = controller_env(module, config)
        keys = {"env_config": cfg} if getattr(module, "BUILD_TAKES_ENV_CONFIG", False) else {}
        keys |= {"method": name} if name in LIBRARY else {}
        controller = module.build(cfg.n_agents, cfg.rounds, seed, **keys)
        if name == "qmix":
            controller.run_dir = run_dir / f"qmix_seed{seed}"
    except ImportError as err:  # an optional extra that is not installed: one line, with its install command
        raise ConfigError(f"method {name!r} cannot run here: {err}") from None
    budget = module.TRAIN_EPISODES  # a module of several methods: a dict by name
    return BuiltController(controller, cfg, int(budget[name] if isinstance(budget, dict) else budget), None)


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
