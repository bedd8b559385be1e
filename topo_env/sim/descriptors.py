"""DyTopo need/offer descriptors of the simulated agents (DyTopo, Sec. 3.1 and Table 6).

DyTopo's agents end every reply with a *query* ("what I need next") and a *key* ("what I
offer"); a controller embeds both and routes j -> i where i's need matches j's offer. An LLM
agent writes them itself; a simulated agent has no words, so the sim backend
(:class:`topo_env.sim.team.SimTeamBackend`) appends them to its reply text, made here from what
the model knows of the call:

* the agent's skill k on the task's subject (a logit offset, ``profile.skills``),
* the confidence c it stated in this reply,
* whether its answer differs from any peer answer it was shown this call,
* whether it is an adversary.

Its *assurance* is ``logit(c) + k + ASSURANCE_NOISE * z`` with z a standard normal: how sure
it feels, on the same logit scale as the model's confidences, blurred because self-assessment
is imprecise. Then

* offer: assurance >= ``OFFER_CONFIDENT`` -> a confident answer on the subject; assurance >=
  ``OFFER_REASONING`` -> its worked reasoning on the subject; below -> only open questions;
* need: its answer differs from a shown peer answer -> the reasoning behind the other answers;
  assurance < ``NEED_CHECK`` -> a check of its answer; else -> no needs;
* an adversary always offers a confident answer and needs nothing: descriptors mislead too
  (the failure mode DyTopo's impact statement names).

The texts come from :data:`NEEDS` / :data:`OFFERS` (one template per category, the subject
filled in), a small vocabulary so that an embedding cache holds them all. Their meanings were
chosen so that all-MiniLM-L6-v2 relevances q . k behave as the routing intends at DyTopo's
thresholds 0.3-0.4 (Table 3): "check" and "resolve" needs match the "confident" and "reasoning"
offers (about 0.45-0.8 across subjects), while the "no needs" query and the "open questions"
offer match nothing above 0.3 (``tests/test_controller_dytopo.py`` pins this).

**Noise without touching the episode's random streams.** z must not be drawn from the episode's
generator (every simulated result, reward and token would shift). It is computed from a hash of
the call's own pre-drawn noise vector (``EpisodeNoise.calls[round, agent, phase]``, already
drawn at the episode's start): BLAKE2b of its float64 bytes gives two 32-bit uniforms, turned
into a normal by Box-Muller. So descriptors are a deterministic function of the episode (same
seed, same texts), and independent across calls in practice, while the model's results stay
bitwise what they were without descriptors.
"""
from __future__ import annotations

import hashlib
import math
import struct
from collections.abc import Sequence

NEEDS: dict[str, str] = {
    "resolve": "I need the reasoning behind the other answers on {subject}, since mine differs.",
    "check": "I need a check of my answer on {subject}.",
    "none": "No needs at the moment.",
}
"""Need (query) templates by category."""

OFFERS: dict[str, str] = {
    "confident": "I offer a confident answer on {subject}.",
    "reasoning": "I offer my worked reasoning on {subject}.",
    "open": "I offer only open questions, no result yet.",
}
"""Offer (key) templates by category."""

SUBJECT_PHRASES: dict[str, str] = {"other": "general knowledge"}
"""Subjects whose profile name reads badly inside a template (MMLU-Pro's "other")."""

ASSURANCE_NOISE = 0.5
"""Standard deviation (logits) of the noise on an agent's assurance."""
OFFER_CONFIDENT = 1.6
"""Assurance from which an agent offers a confident answer (logit(0.8) = 1.39 plus a little skill)."""
OFFER_REASONING = 0.7
"""Assurance from which an agent offers its reasoning (about confidence 0.67 at zero skill)."""
NEED_CHECK = 1.6
"""Assurance below which an agent asks for a check of its answer."""


def call_normal(noise: Sequence[float]) -> float:
    """A standard normal that is a deterministic function of a call's noise vector (its hash)."""
    digest = hashlib.blake2b(struct.pack(f"<{len(noise)}d", *noise), digest_size=8).digest()
    a, b = struct.unpack("<II", digest)
    u1, u2 = (a + 0.5) / 2.0 ** 32, (b + 0.5) / 2.0 ** 32  # in (0, 1): log(u1) is finite
    return math.sqrt(-2.0 * math.log(u1)) * math.cos(2.0 * math.pi * u2)


def categories(skill: float, confidence: float, disagrees: bool, adversarial: bool, z: float) -> tuple[str, str]:
    """(need category, offer category) of one reply; ``z`` is the call's standard normal."""
    if adversarial:
        return "none", "confident"
    c = min(max(float(confidence), 1e-6), 1.0 - 1e-6)
    assurance = math.log(c / (1.0 - c)) + float(skill) + ASSURANCE_NOISE * z
    if assurance >= OFFER_CONFIDENT:
        offer = "confident"
    elif assurance >= OFFER_REASONING:
        offer = "reasoning"
    else:
        offer = "open"
    if disagrees:
        need = "resolve"
    elif assurance < NEED_CHECK:
        need = "check"
    else:
        need = "none"
    return need, offer


def descriptor_lines(subject: str, skill: float, confidence: float, disagrees: bool, adversarial: bool,
                     noise: Sequence[float]) -> str:
    """The ``NEED: ...`` and ``OFFER: ...`` lines a simulated agent appends to its reply.

    ``noise``: the call's pre-drawn noise vector (only hashed, never consumed)."""
    need, offer = categories(skill, confidence, disagrees, adversarial, call_normal(noise))
    phrase = SUBJECT_PHRASES.get(subject, subject)
    return f"NEED: {NEEDS[need].format(subject=phrase)}\nOFFER: {OFFERS[offer].format(subject=phrase)}"
