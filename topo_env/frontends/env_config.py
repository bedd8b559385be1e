"""Typed, validated configuration of the topology env (the ``env:`` section of a YAML config)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from topo_env.engine.config_checks import (
    ConfigError, as_tuple, check_choice, check_int, check_number, is_int, public_dict,
)
from topo_env.frontends.comm_actions import ACTION_NAMES, N_ACTIONS
from topo_env.frontends.encoders import ENCODERS
from topo_env.engine.backend_registry import backend_config
from topo_env.engine.decision import parse_decision
from topo_env.engine.roles import TeamPlacement, default_personas
from topo_env.sim.config import SIM_KEYS
from topo_env.sim.tasks import SPLITS
from topo_env.frontends.targets import TARGET_RULES
from topo_env.engine.tasks import DOMAINS

REWARD_MODES: tuple[str, ...] = ("sparse", "shaped")
RENDER_MODES: tuple[str | None, ...] = (None, "ansi", "rgb_array", "human")
FORMER_KEYS: tuple[tuple[str, str], ...] = (
    ("llm", "env.backend.model (each key of it: env.backend.KEY)"), ("dataset", "env.backend.dataset"),
    ("train_size", "env.backend.train_size"))
"""Env keys of 0.1 (refused as unknown since 0.2) and where their values live now, with
``backend: {kind: llm, ...}``; the unknown-key error names the place."""


@dataclass(frozen=True)
class EnvConfig:
    """Everything that defines an env instance. Keys equal the YAML keys and the keyword
    arguments of :func:`topo_env.parallel_env`.

    Attributes:
        n_agents: team size N >= 2 (paper: 3).
        rounds: communication rounds T >= 1 per episode (paper: 3 math, 2 code/reasoning).
        domain: optional; if given, must be a known domain and match the profile's (the LLM
            backend needs it: the domain its dataset's tasks are drawn from).
        backend: who answers, with that backend's keys (:mod:`topo_env.engine.backend_registry`):
            ``"sim"`` / ``{kind: sim, profile: ..., team: ...}`` (the calibrated simulated team, the
            default; :class:`~topo_env.sim.config.SimBackendConfig`: ``profile`` a built-in name or a
            profile YAML file, ``team`` the agents' models; both may be given at the env's top level
            too, :func:`nest_sim_keys`) or
            ``{kind: llm, model: ..., base_url: ..., dataset: ..., train_size: ...}``
            (:class:`~agents_llm.config.LLMBackendConfig`); a string means ``{kind: <string>}``.
            Built into that kind's frozen config dataclass; ``api_key`` is never written out.
        roles: role kind per agent (``specialist`` / ``analyzer``); default N-1 specialists
            then one analyzer, as in the paper's teams.
        adversarial_agents: with ``adversary_position="fixed"``, the indices of the agents
            replaced by adversaries in every episode.
        adversary_position: ``"fixed"`` (the agents in ``adversarial_agents``) or ``"random"``
            (each episode, ``n_adversaries`` distinct agents drawn uniformly from the episode's
            seeded RNG after its task and noise: same seed, same placement; a policy must
            then tell the adversary from its behaviour, not its index).
        n_adversaries: adversaries per episode. ``"random"`` needs it (1..N-1) and an empty
            ``adversarial_agents``; with ``"fixed"`` it is best left out (``None``; if given it
            must equal ``len(adversarial_agents)``). :attr:`adversary_count` is the count either way.
        w_acc, w_tok, max_tokens: reward R = w_acc * acc - w_tok * min(tokens / max_tokens, 1).
        reward_mode: ``sparse`` (R at the last round) or ``shaped`` (token penalty per round,
            same return).
        target_rule: who selective_query / debate_check point at (``topo_env.frontends.targets``).
        encoder, embed_dim: task text encoder for observations (``hashed`` or ``minilm``).
        disabled_actions: actions masked out for every agent (names or indices).
        split: task split episodes draw from (``train`` or ``eval``: disjoint tasks).
        train_tasks: the number of training tasks K: episodes of the train split draw their task among
            the split's tasks 0 .. K - 1 (uniformly, with the same one random draw as without it:
            :func:`~topo_env.engine.tasks.draw_task_index`), so training, its teacher's demonstrations
            and validation meet K distinct tasks at most; the eval split is unchanged. None (the
            default): a fresh task index from 2^31 at every reset. Written to configs only when set,
            so files of runs without it read as before.
        render_mode: ``None``, ``"ansi"`` (the transcript), ``"rgb_array"`` (the round's topology picture) or
            ``"human"`` (that picture in a window, or saved where no display exists).
        personas: persona per agent (e.g. "algorithm designer"; see ``topo_env.engine.roles``), in the
            LLM agents' prompts and in every agent's observation; default: the analyzer is the
            critical reviewer, specialists take the domain's personas in turn.
        descriptors: agents end each reply with DyTopo's ``NEED: ...`` and ``OFFER: ...`` lines
            (what they need from teammates next, what they can give): an LLM team is asked for
            them in its prompt, the simulated team writes them from its state
            (:mod:`topo_env.sim.descriptors`). Off by default: the replies, prompts and every
            figure stay as they were; the DyTopo controller turns it on.
        decision: how the episode's answer is decided (:mod:`topo_env.engine.decision`): ``"llm"`` (the
            paper's decision node, one LLM call; the default), ``"vote"`` (a plurality vote of the
            finals of the agents that ran, ties to the larger summed stated confidence, then the lowest
            agent index; no call, no tokens; "Debate or Vote", Choi et al. 2025) or ``"agent:K"``
            (agent K's final answer; the vote where agent K never ran). Both backends read it.
    """

    n_agents: int = 3
    rounds: int = 2
    domain: str | None = None
    backend: Any = "sim"  # after validation: the kind's config dataclass (topo_env.engine.backend_registry)
    roles: tuple[str, ...] | None = None
    adversarial_agents: tuple[int, ...] = ()
    adversary_position: str = "fixed"
    n_adversaries: int | None = None
    w_acc: float = 1.25
    w_tok: float = 0.10
    max_tokens: int = 10000
    reward_mode: str = "sparse"
    target_rule: str = "disagree"
    encoder: str = "hashed"
    embed_dim: int = 64
    disabled_actions: tuple[int, ...] = ()
    split: str = "train"
    train_tasks: int | None = None  # None: every task index; K: the train split's tasks 0..K-1
    render_mode: str | None = None
    personas: tuple[str, ...] | None = None  # None: topo_env.engine.roles.default_personas
    descriptors: bool = False
    decision: str = "llm"  # topo_env.engine.decision: "llm", "vote" or "agent:K"

    def __post_init__(self) -> None:
        placement = TeamPlacement(self.n_agents, self.rounds, self.roles, self.adversarial_agents,
                                  self.adversary_position, self.n_adversaries)  # validates
        for key in ("n_agents", "rounds", "roles", "adversarial_agents", "adversary_position", "n_adversaries"):
            object.__setattr__(self, key, getattr(placement, key))
        object.__setattr__(self, "_placement", placement)  # not a field: equality and replace() ignore it
        if self.domain is not None:
            check_choice(self, "domain", DOMAINS)
        object.__setattr__(self, "backend", backend_config(self.backend))
        check = getattr(self.backend, "check", None)
        if check is not None:  # the backend's own cross-key checks (an LLM team's domain, a sim team's size)
            check(self)
        roles = self.roles
        for key in ("w_acc", "w_tok"):
            check_number(self, key, 0)
        check_int(self, "max_tokens", minimum=1)
        check_choice(self, "reward_mode", REWARD_MODES)
        check_choice(self, "target_rule", TARGET_RULES)
        check_choice(self, "encoder", ENCODERS)
        check_int(self, "embed_dim", minimum=8)
        disabled = []
        for a in as_tuple("disabled_actions", self.disabled_actions):
            if isinstance(a, str) and a in ACTION_NAMES:
                disabled.append(ACTION_NAMES.index(a))
            elif is_int(a) and 0 <= a < N_ACTIONS:
                disabled.append(int(a))
            else:
                raise ConfigError(f"disabled_actions contains {a!r}: use action names {list(ACTION_NAMES)} or 0..5")
        if len(set(disabled)) >= N_ACTIONS:
            raise ConfigError("disabled_actions disables every action")
        object.__setattr__(self, "disabled_actions", tuple(sorted(set(disabled))))
        check_choice(self, "split", tuple(SPLITS))
        if self.train_tasks is not None:  # None: every task
            check_int(self, "train_tasks", minimum=1)
        check_choice(self, "render_mode", RENDER_MODES)
        personas = self.personas
        if personas is None:
            personas = default_personas(self.resolved_domain, roles)
        personas = as_tuple("personas", personas)
        if len(personas) != self.n_agents:
            raise ConfigError(f"personas={list(personas)!r} has {len(personas)} entries, n_agents is {self.n_agents}")
        for persona in personas:
            if not isinstance(persona, str) or not persona.strip():
                raise ConfigError(f"personas contains {persona!r}: each must be a non-empty string")
        object.__setattr__(self, "personas", personas)
        if not isinstance(self.descriptors, bool):
            raise ConfigError(f"descriptors={self.descriptors!r}: must be true or false")
        object.__setattr__(self, "decision", str(parse_decision(self.decision, self.n_agents)))

    @property
    def placement(self) -> TeamPlacement:
        """Roles and adversaries as the engine's :class:`~topo_env.engine.roles.TeamPlacement`."""
        return self._placement

    @property
    def adversary_count(self) -> int:
        """Adversaries per episode (fixed or random)."""
        return self.placement.adversary_count

    def draw_adversaries(self, rng: np.random.Generator) -> tuple[int, ...]:
        """The adversaries of one episode (:meth:`TeamPlacement.draw_adversaries`)."""
        return self.placement.draw_adversaries(rng)

    @property
    def resolved_domain(self) -> str:
        """The domain the team solves: ``domain`` when given, else the backend's (the simulated
        team's profile's)."""
        if self.domain is not None:
            return self.domain
        domain = getattr(self.backend, "domain", None)
        if domain is None:
            raise ConfigError(f"backend kind {self.backend.kind!r} names no domain: give env.domain")
        return domain

    @property
    def team_label(self) -> str:
        """What names the team in run folders and tables: the backend config's ``label`` where it
        has one (the simulated team: its profile), else ``<kind>-<domain>`` (e.g. ``llm-reasoning``)."""
        return getattr(self.backend, "label", None) or f"{self.backend.kind}-{self.resolved_domain}"

    @classmethod
    def from_dict(cls, values: dict[str, Any] | None) -> "EnvConfig":
        """Build from a mapping; an unknown key raises a one-line ConfigError naming it (and, for a
        key of :data:`FORMER_KEYS`, where it lives now)."""
        values = dict(values or {})
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known - set(SIM_KEYS))
        if unknown:
            now = "".join(f"; {key!r} is now {place}" for key, place in FORMER_KEYS if key in unknown)
            raise ConfigError(f"unknown env config key(s) {unknown}{now}; known keys: {sorted(known | set(SIM_KEYS))}")
        return cls(**nest_sim_keys(values))

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["roles"] = list(self.roles)
        d["adversarial_agents"] = list(self.adversarial_agents)
        d["disabled_actions"] = [ACTION_NAMES[a] for a in self.disabled_actions]
        d["backend"] = public_dict(self.backend)
        d["personas"] = list(self.personas)
        if self.train_tasks is None:  # unset: the dict of a config from before the key (fingerprints, kept runs)
            del d["train_tasks"]
        return d


def nest_sim_keys(values: dict[str, Any]) -> dict[str, Any]:
    """An env section with the simulated team's keys given at its top level (``profile``, ``team``:
    the short spelling of YAML files, keyword arguments and ``--set env.profile=...``) in the nested
    form: they move into ``backend`` (a top-level key wins over the same key in ``backend``). Another
    backend kind has no such keys: they are dropped, as a YAML written for the simulated team is
    switched to an LLM one with ``--set env.backend.kind=llm``."""
    short = {key: values[key] for key in SIM_KEYS if key in values}
    if not short:
        return dict(values)
    backend = values.get("backend", "sim")
    if isinstance(backend, str):
        backend = {"kind": backend}
    elif dataclasses.is_dataclass(backend) and not isinstance(backend, type):
        backend = {f.name: getattr(backend, f.name) for f in dataclasses.fields(backend)}
    rest = {key: value for key, value in values.items() if key not in SIM_KEYS}
    if not isinstance(backend, dict) or backend.get("kind") != "sim":
        return rest  # another team (e.g. --set env.backend.kind=llm over a sim YAML): the sim's keys do not apply
    return {**rest, "backend": {**backend, **short}}


def env_difference(a: EnvConfig, b: EnvConfig) -> str | None:
    """``"env.KEY: A against B"`` for the first field where two env configs differ (the backend
    without its API key), or None when they are equal."""
    for f in dataclasses.fields(a):
        va, vb = getattr(a, f.name), getattr(b, f.name)
        if va != vb:
            if f.name == "backend":
                va, vb = public_dict(va), public_dict(vb)
            return f"env.{f.name}: {va!r} against {vb!r}"
    return None

