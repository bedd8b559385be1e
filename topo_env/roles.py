"""Who the agents are: role kinds and personas (paper Appendix D).

A team has N-1 domain *specialists* and one *analyzer* (the AnalyzeAgent critic) by default.
A specialist also has a *persona*, the angle it works from (the paper's CodeWriter cycles
through project manager, algorithm designer, ...). Here the persona of every agent is fixed
per agent and explicit in the config (``personas``), never rotated behind the scenes, and it
is part of the agent's observation (one-hot over :data:`PERSONA_VOCAB`, plus one slot for a
persona outside it).
"""
from __future__ import annotations

from collections.abc import Sequence

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
