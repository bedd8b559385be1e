"""Who the agents are: role kinds and personas (paper Appendix D), and where adversaries sit.

A team has N-1 domain *specialists* and one *analyzer* (the AnalyzeAgent critic) by default.
A specialist also has a *persona*, the angle it works from (the paper's CodeWriter cycles
through project manager, algorithm designer, ...). Here the persona of every agent is fixed
per agent and explicit in the config (``personas``), never rotated behind the scenes, and it
is part of the agent's observation (one-hot over :data:`PERSONA_VOCAB`, plus one slot for a
persona outside it).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from topo_env.engine.config_checks import ConfigError, as_tuple, check_choice, check_int, is_int

ROLE_KINDS: tuple[str, ...] = ("specialist", "analyzer")
REVIEWER_PERSONA = "critical reviewer"
PERSONAS: dict[str, tuple[str, ...]] = {
    "code": ("project manager", "algorithm designer", "programming expert", "test analyst", "bug fixer"),
    "math": ("math solver", "mathematical analyst", "programming expert", "inspector"),
    "reasoning": ("reasoning expert",),
}
PERSONA_VOCAB: tuple[str, ...] = tuple(dict.fromkeys(
    [p for domain in ("code", "math", "reasoning") for p in PERSONAS[domain]] + [REVIEWER_PERSONA]))
"""Every built-in persona once, in a fixed order (the observation's persona one-hot)."""


def persona_of(domain: str, agent: int, role: str) -> str:
    """Default persona of agent ``agent``: the analyzer is the critical reviewer; specialists
    take the domain's personas in turn (agent 0 the first, ...)."""
    if role == "analyzer":
        return REVIEWER_PERSONA
    return PERSONAS[domain][agent % len(PERSONAS[domain])]


def default_personas(domain: str, roles: Sequence[str]) -> tuple[str, ...]:
    """One persona per agent, by :func:`persona_of`."""
    return tuple(persona_of(domain, i, r) for i, r in enumerate(roles))


def persona_slot(persona: str) -> int:
    """Index of ``persona`` in the observation's persona block: its place in
    :data:`PERSONA_VOCAB`, or ``len(PERSONA_VOCAB)`` for any other persona."""
    try:
        return PERSONA_VOCAB.index(persona)
    except ValueError:
        return len(PERSONA_VOCAB)


ADVERSARY_POSITIONS: tuple[str, ...] = ("fixed", "random")


@dataclass(frozen=True)
class TeamPlacement:
    """Who sits where in a team of ``n_agents`` playing ``rounds`` rounds: role kind per agent
    (default N-1 specialists then one analyzer) and the adversaries, at fixed indices
    (``adversarial_agents``) or drawn per episode (``adversary_position="random"``, ``n_adversaries``
    of them). Validated on construction; the keys are the env config's, and errors name them."""

    n_agents: int = 3
    rounds: int = 2
    roles: tuple[str, ...] | None = None
    adversarial_agents: tuple[int, ...] = ()
    adversary_position: str = "fixed"
    n_adversaries: int | None = None

    def __post_init__(self) -> None:
        check_int(self, "n_agents", minimum=2)
        check_int(self, "rounds", minimum=1)
        roles = self.roles
        if roles is None:
            roles = ("specialist",) * (self.n_agents - 1) + ("analyzer",)
        roles = as_tuple("roles", roles)
        if len(roles) != self.n_agents:
            raise ConfigError(f"roles={list(roles)!r} has {len(roles)} entries, n_agents is {self.n_agents}")
        for r in roles:
            if r not in ROLE_KINDS:
                raise ConfigError(f"roles contains {r!r}; known role kinds: {list(ROLE_KINDS)}")
        object.__setattr__(self, "roles", roles)
        adv = check_adversaries(self.adversarial_agents, self.n_agents, "adversarial_agents")
        object.__setattr__(self, "adversarial_agents", adv)
        check_choice(self, "adversary_position", ADVERSARY_POSITIONS)
        count = self.n_adversaries
        if count is not None and (not is_int(count) or not 0 <= count < self.n_agents):
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


def check_adversaries(values: Any, n_agents: int, key: str) -> tuple[int, ...]:
    """``values`` as a tuple of distinct agent indices in 0..N-1 that leaves an honest agent;
    a ConfigError naming ``key`` and the bad value otherwise."""
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        raise ConfigError(f"{key}={values!r}: must be a list")
    adv = tuple(values)
    for i in adv:
        if not is_int(i) or not 0 <= i < n_agents:
            raise ConfigError(f"{key} contains {i!r}: must be agent indices in 0..{n_agents - 1}")
    if len(set(adv)) != len(adv):
        raise ConfigError(f"{key}={list(adv)!r} repeats an agent")
    if len(adv) >= n_agents:
        raise ConfigError(f"{key}={list(adv)!r} leaves no honest agent")
    return tuple(int(i) for i in adv)
