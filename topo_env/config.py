"""Typed, validated configuration of the topology env (the ``env:`` section of a YAML config)."""
from __future__ import annotations

import dataclasses
import numbers
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from topo_env.actions import ACTION_NAMES, N_ACTIONS
from topo_env.roles import ROLE_KINDS, default_personas
from topo_env.sim.profiles import PROFILES, get_model, get_profile, is_profile_path
from topo_env.sim.tasks import SPLITS
from topo_env.targets import TARGET_RULES
from topo_env.tasks import DOMAINS

REWARD_MODES: tuple[str, ...] = ("sparse", "shaped")
ADVERSARY_POSITIONS: tuple[str, ...] = ("fixed", "random")
RENDER_MODES: tuple[str | None, ...] = (None, "ansi", "rgb_array", "human")
MOVED_TO_BACKEND: tuple[str, ...] = ("llm", "dataset", "train_size")
"""Old top-level env keys that now live in ``env.backend`` (refused with the nested form)."""


class ConfigError(ValueError):
    """A configuration key has a bad value; the message names the key and the value."""


@dataclass(frozen=True)
class EnvConfig:
    """Everything that defines an env instance. Keys equal the YAML keys and the keyword
    arguments of :func:`topo_env.parallel_env`.

    Attributes:
        n_agents: team size N >= 2 (paper: 3).
        rounds: communication rounds T >= 1 per episode (paper: 3 math, 2 code/reasoning).
        profile: simulated benchmark profile: a name in ``topo_env.sim.profiles.PROFILES`` or the path
            of a profile YAML file (``*.yaml``, e.g. written by ``python -m topo_env.sim.fit``).
        domain: optional; if given, must be a known domain and match the profile's (the LLM
            backend needs it: the domain its dataset's tasks are drawn from).
        backend: who answers, with that backend's keys (:mod:`topo_env.backends`):
            ``"sim"`` / ``{kind: sim}`` (the calibrated simulated team, the default) or
            ``{kind: llm, model: ..., base_url: ..., dataset: ..., train_size: ...}``
            (:class:`~topo_env.backends.LLMBackendConfig`); a string means ``{kind: <string>}``.
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
        target_rule: who selective_query / debate_check point at (``topo_env.targets``).
        encoder, embed_dim: task text encoder for observations (``hashed`` or ``minilm``).
        disabled_actions: actions masked out for every agent (names or indices).
        split: task split episodes draw from (``train`` or ``eval``: disjoint tasks).
        render_mode: ``None``, ``"ansi"`` (the transcript), ``"rgb_array"`` (the round's topology picture) or
            ``"human"`` (that picture in a window, or saved where no display exists).
        team: the simulated agents' models, one per agent (cycled if shorter): names from
            ``topo_env.sim.profiles.MODELS`` or mappings ``{name, ability, spread, verbosity}``
            (:class:`~topo_env.sim.profiles.AgentModel`); ``None``: the profile's team (personas of
            one model, or ``mmlu_pro_mixed``'s models of different strengths).
        personas: persona per agent (e.g. "algorithm designer"; see ``topo_env.roles``), in the
            LLM agents' prompts and in every agent's observation; default: the analyzer is the
            critical reviewer, specialists take the domain's personas in turn.
        descriptors: agents end each reply with DyTopo's ``NEED: ...`` and ``OFFER: ...`` lines
            (what they need from teammates next, what they can give): an LLM team is asked for
            them in its prompt, the simulated team writes them from its state
            (:mod:`topo_env.sim.descriptors`). Off by default: the replies, prompts and every
            figure stay as they were; the DyTopo controller turns it on.
    """

    n_agents: int = 3
    rounds: int = 2
    profile: str = "mmlu_pro"
    domain: str | None = None
    backend: Any = "sim"  # after validation: the kind's config dataclass (topo_env.backends)
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
    render_mode: str | None = None
    personas: tuple[str, ...] | None = None  # None: topo_env.roles.default_personas
    team: tuple | None = None  # None: the profile's team (topo_env.sim.profiles)
    descriptors: bool = False

    def __post_init__(self) -> None:
        _int(self, "n_agents", minimum=2)
        _int(self, "rounds", minimum=1)
        if is_profile_path(self.profile):
            try:
                get_profile(self.profile)
            except ValueError as e:
                raise ConfigError(f"profile={self.profile!r}: {e}") from None
        else:
            _choice(self, "profile", tuple(PROFILES))
        if self.domain is not None:
            _choice(self, "domain", DOMAINS)
        from topo_env.backends import backend_config  # local: topo_env.backends imports this module

        object.__setattr__(self, "backend", backend_config(self.backend))
        roles = self.roles
        if roles is None:
            roles = ("specialist",) * (self.n_agents - 1) + ("analyzer",)
        roles = _tuple(self, "roles", roles)
        if len(roles) != self.n_agents:
            raise ConfigError(f"roles={list(roles)!r} has {len(roles)} entries, n_agents is {self.n_agents}")
        for r in roles:
            if r not in ROLE_KINDS:
                raise ConfigError(f"roles contains {r!r}; known role kinds: {list(ROLE_KINDS)}")
        object.__setattr__(self, "roles", roles)
        adv = check_adversaries(self.adversarial_agents, self.n_agents, "adversarial_agents")
        object.__setattr__(self, "adversarial_agents", adv)
        _choice(self, "adversary_position", ADVERSARY_POSITIONS)
        count = self.n_adversaries
        if count is not None and (not _is_int(count) or not 0 <= count < self.n_agents):
            raise ConfigError(f"n_adversaries={count!r}: must be an integer in 0..{self.n_agents - 1} "
                              f"(at least one honest agent among n_agents={self.n_agents})")
        if self.adversary_position == "random":
            if adv:
                raise ConfigError(f"adversarial_agents={list(adv)!r} with adversary_position='random': the "
                                  "adversaries are drawn per episode; leave adversarial_agents empty and set n_adversaries")
            if count is None or count < 1:
                raise ConfigError(f"adversary_position='random' needs n_adversaries >= 1, got n_adversaries={count!r}")
        elif count is not None and count != len(adv):
            raise ConfigError(f"n_adversaries={count!r} but adversarial_agents={list(adv)!r} names {len(adv)} "
                              "(with adversary_position='fixed' the count is len(adversarial_agents))")
        if count is not None:
            object.__setattr__(self, "n_adversaries", int(count))
        for key in ("w_acc", "w_tok"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, numbers.Real) or not value >= 0 or value == float("inf"):
                raise ConfigError(f"{key}={value!r}: must be a finite number >= 0")
            object.__setattr__(self, key, float(value))
        _int(self, "max_tokens", minimum=1)
        _choice(self, "reward_mode", REWARD_MODES)
        _choice(self, "target_rule", TARGET_RULES)
        from topo_env.encoders import ENCODERS  # local: encoders import heavy libraries lazily

        _choice(self, "encoder", ENCODERS)
        _int(self, "embed_dim", minimum=8)
        disabled = []
        for a in _tuple(self, "disabled_actions", self.disabled_actions):
            if isinstance(a, str) and a in ACTION_NAMES:
                disabled.append(ACTION_NAMES.index(a))
            elif _is_int(a) and 0 <= a < N_ACTIONS:
                disabled.append(int(a))
            else:
                raise ConfigError(f"disabled_actions contains {a!r}: use action names {list(ACTION_NAMES)} or 0..5")
        if len(set(disabled)) >= N_ACTIONS:
            raise ConfigError("disabled_actions disables every action")
        object.__setattr__(self, "disabled_actions", tuple(sorted(set(disabled))))
        _choice(self, "split", tuple(SPLITS))
        _choice(self, "render_mode", RENDER_MODES)
        personas = self.personas
        if personas is None:
            personas = default_personas(self.domain or get_profile(self.profile).domain, roles)
        personas = _tuple(self, "personas", personas)
        if len(personas) != self.n_agents:
            raise ConfigError(f"personas={list(personas)!r} has {len(personas)} entries, n_agents is {self.n_agents}")
        for persona in personas:
            if not isinstance(persona, str) or not persona.strip():
                raise ConfigError(f"personas contains {persona!r}: each must be a non-empty string")
        object.__setattr__(self, "personas", personas)
        if not isinstance(self.descriptors, bool):
            raise ConfigError(f"descriptors={self.descriptors!r}: must be true or false")
        if self.team is not None:
            try:  # names stay names; mappings become (hashable) AgentModels
                team = tuple(m if isinstance(m, str) else get_model(m) for m in _tuple(self, "team", self.team))
                get_profile(self.profile).team_models(self.n_agents, team)
            except ValueError as e:
                raise ConfigError(f"team: {e}") from None
            object.__setattr__(self, "team", team)
        check = getattr(self.backend, "check", None)
        if check is not None:
            check(self)

    @property
    def adversary_count(self) -> int:
        """Adversaries per episode (fixed or random)."""
        return len(self.adversarial_agents) if self.adversary_position == "fixed" else int(self.n_adversaries)

    def draw_adversaries(self, rng: np.random.Generator) -> tuple[int, ...]:
        """The adversaries of one episode, sorted: ``adversarial_agents`` when fixed (no draw);
        when random, ``n_adversaries`` distinct agents drawn uniformly with ``rng``."""
        if self.adversary_position == "fixed":
            return tuple(sorted(self.adversarial_agents))
        return tuple(sorted(int(i) for i in rng.choice(self.n_agents, size=self.n_adversaries, replace=False)))

    @property
    def resolved_domain(self) -> str:
        """The domain the team solves: ``domain`` when given, else the profile's."""
        return self.domain if self.domain is not None else get_profile(self.profile).domain

    @classmethod
    def from_dict(cls, values: dict[str, Any] | None) -> "EnvConfig":
        """Build from a mapping; an unknown key raises a ConfigError naming it, and the keys that
        moved under ``backend`` (``llm``, ``dataset``, ``train_size``) one showing the nested form."""
        values = dict(values or {})
        moved = [key for key in MOVED_TO_BACKEND if key in values]
        if moved:
            raise ConfigError(f"env key(s) {moved} moved under env.backend: write backend: {{kind: llm, model: ..., "
                              "base_url: ..., dataset: ..., train_size: ...} (keys in topo_env/backends.py)")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ConfigError(f"unknown env config key(s) {unknown}; known keys: {sorted(known)}")
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["roles"] = list(self.roles)
        d["adversarial_agents"] = list(self.adversarial_agents)
        d["disabled_actions"] = [ACTION_NAMES[a] for a in self.disabled_actions]
        d["backend"] = public_dict(self.backend)
        d["personas"] = list(self.personas)
        if self.team is not None:
            d["team"] = [m if isinstance(m, str) else dataclasses.asdict(m) for m in self.team]
        return d


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


def load_yaml(path: str | Path) -> dict[str, Any]:
    """Read a YAML config file into a dict (a clear error if it is not a mapping)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file {str(path)!r} does not exist; give the path of a YAML config (the shipped ones "
                          "are in configs/)")
    data = parse_yaml(path.read_text())
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {str(path)!r} must hold a mapping, got {type(data).__name__}")
    return data


def load_env_config(path: str | Path, overrides: dict[str, Any] | None = None) -> EnvConfig:
    """The ``env:`` section of a YAML config (keys missing there take the defaults),
    with ``overrides`` applied on top; validated."""
    data = load_yaml(path)
    unknown = sorted(set(data) - {"env", "learner", "train", "eval", "llm"})
    if unknown:
        raise ConfigError(f"config file {str(path)!r} has unknown section(s) {unknown}")
    section = data.get("env") or {}
    if not isinstance(section, dict):
        raise ConfigError(f"section 'env' of {str(path)!r} must be a mapping")
    return EnvConfig.from_dict({**section, **(overrides or {})})


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


def nest_legacy_backend(section: dict[str, Any]) -> dict[str, Any]:
    """An ``env`` section saved before the backend keys were nested (results.json, config.json
    and checkpoints of older runs) in today's form: ``llm``, ``dataset`` and ``train_size`` move
    into ``backend``. Sections already nested come back unchanged; meant for saved runs only
    (hand-written configs with the old keys are refused, see :meth:`EnvConfig.from_dict`)."""
    if not any(key in section for key in MOVED_TO_BACKEND):
        return dict(section)
    section = dict(section)
    llm, dataset, train_size = (section.pop(key, None) for key in MOVED_TO_BACKEND)
    if section.get("backend", "sim") == "llm":
        section["backend"] = {"kind": "llm", **(llm or {}), "dataset": dataset,
                              **({} if train_size is None else {"train_size": train_size})}
    return section


def check_adversaries(values: Any, n_agents: int, key: str) -> tuple[int, ...]:
    """``values`` as a tuple of distinct agent indices in 0..N-1 that leaves an honest agent;
    a ConfigError naming ``key`` and the bad value otherwise."""
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        raise ConfigError(f"{key}={values!r}: must be a list")
    adv = tuple(values)
    for i in adv:
        if not _is_int(i) or not 0 <= i < n_agents:
            raise ConfigError(f"{key} contains {i!r}: must be agent indices in 0..{n_agents - 1}")
    if len(set(adv)) != len(adv):
        raise ConfigError(f"{key}={list(adv)!r} repeats an agent")
    if len(adv) >= n_agents:
        raise ConfigError(f"{key}={list(adv)!r} leaves no honest agent")
    return tuple(int(i) for i in adv)


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


def _is_int(v: Any) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def _int(cfg: EnvConfig, key: str, minimum: int) -> None:
    v = getattr(cfg, key)
    if not _is_int(v) or v < minimum:
        raise ConfigError(f"{key}={v!r}: must be an integer >= {minimum}")
    object.__setattr__(cfg, key, int(v))


def _choice(cfg: EnvConfig, key: str, options: tuple) -> None:
    v = getattr(cfg, key)
    if v not in options:
        raise ConfigError(f"{key}={v!r}: must be one of {list(options)}")


def _tuple(cfg: EnvConfig, key: str, v: Any) -> tuple:
    if isinstance(v, (str, bytes)) or not hasattr(v, "__iter__"):
        raise ConfigError(f"{key}={v!r}: must be a list")
    return tuple(v)
