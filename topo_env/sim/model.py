"""The stochastic model of a simulated agent call (the documented model behind ``backend="sim"``).

Answers are labels: 0 is correct, 1 is the task's *trap* (the persuasive wrong answer), 2..K other
wrong answers (K = ``profile.n_wrong``, Zipf-weighted). Symbols: d the task's difficulty in [0, 1],
s its subject, z its hidden latent (N(0, 1), shared by every agent: the same blind spots), u_i agent
i's blind spot for the episode (N(0, 1), drawn once per episode), k_is agent i's skill on subject s
(:class:`topo_env.sim.profiles.AgentModel`), b_s and v_s the subject's offset and verifiability,
c a stated confidence, vf(verdict) = ``verdict_pass_weight`` / ``verdict_fail_weight`` / 1.
sigma(x) = 1 / (1 + e^-x).

One call of agent i (role r) shown its own previous output o (or nothing) and peer messages M:

1. **Attempt.** eta = alpha + b_s + k_is + a_r - beta (d - 1/2) + task_spread z + blind_spread u_i
   (+ ``debug_gain`` when o failed verification: the agent re-solves with the failing tests in hand,
   Self-Debugging arXiv 2304.05128: up to +12% with unit tests). Correct with probability sigma(eta);
   a wrong attempt is the trap with probability min(1, trap_base + trap_slope d) (harder tasks fail
   the same way), else a Zipf-drawn other wrong label. c_att = sigma(mu + sigma_conf z1), mu =
   ``mu_correct`` or ``mu_wrong``.
2. **Own answer.** Without o, or when o failed verification, the agent holds its attempt with weight
   w = ``w_fresh`` c_att (not yet committed: anchoring is weak). Otherwise it holds o with w =
   ``w_commit`` c_o vf(o): later rounds *update* an answer, they do not re-solve it.
3. **Update.** No messages: the agent keeps its answer, except that a committed answer drifts
   (self-revision without new information, Huang et al. "Large Language Models Cannot Self-Correct
   Reasoning Yet": correct -> trap with ``drift_cw``, wrong -> correct with ``drift_wc``).
   With messages, every answer on the table scores

       S(a) = w [a = own] + w_peer sum_{m in M, a_m = a} c_m vf(m)
              + [a = 0 shown by a peer] (max(0, rho + rho_v v_s) (1 - rho_d d) f_r + k_is)^+
              + [a = trap shown by a peer] max(0, theta - theta_v v_s) d  +  tau G_a

   (G_a standard Gumbel) and the agent answers the best. Conformity pulls toward the shown majority
   weighted by stated confidence and verdicts; a shown right answer is recognised where a derivation
   can be checked and on easier tasks, a shown trap persuades where it cannot and on harder ones
   (Du et al. arXiv 2305.14325; "Not All Flips Are Conformity" arXiv 2606.00820).
4. **Confidence out.** sigma(mu + kappa (support - 1/2) + sigma_conf z2), support the share of the
   raw weight (own and peers) behind the answer.
5. **Adversary.** Always answers the trap and never switches; its confidence is computed as an
   honest agent's holding the trap (no fingerprint); it costs tokens like anyone else.
6. **Tokens.** prompt = sys + task + sum over inputs (header + content + verdict text): context
   grows with in-degree. completion = content + reasoning, content ~ content_mean f_content e^{0.3 z},
   reasoning ~ reason_mean verbosity (0.6 + 0.8 d) (f + conflict * share of inputs disagreeing with
   the answer) e^{0.4 z} with f = 1 for an attempt, ``revisit`` when revising with new inputs, and
   ``reemit`` when nothing new was shown (the answer is re-emitted almost free).
7. **Decision node.** A weighted vote over the finals: S(a) = sum_j c_j vf(j) t_j [a_j = a] +
   ``decide_tau`` G_a, with t_j = ``contradicted_weight`` when an agent whose answer passed
   verification holds another answer (and j did not pass), else 1. "Debate or Vote" (arXiv
   2508.17536): most of a team's gain is the vote; debate alone is close to a martingale.

Verification (execute_verify): code checks pass a correct program with probability
``verify_pass_correct`` and catch a wrong one with ``verify_detect``, the trap only with
``verify_detect`` (1 + v_s) / 2: the plausible wrong program is the one that passes shallow visible
tests, and more so where the subject's checks are shallow (EvalPlus, arXiv 2305.01210: HumanEval's own
tests let many wrong programs pass); math checks work the same but only when the agent wrote code
(``p_wrote_code``), else no verdict; reasoning has no verifier.

Pinned by publications: the calibration targets (Table 1 / Table 3, :mod:`topo_env.sim.calibrate`),
the conformity rates and their correct -> wrong share (``tests/test_sim_model.py``), self-revision
drifting down, verification gains. Not pinned by any published figure: the anchoring weight
``w_fresh``, the verifiability strengths ``rho_v`` / ``theta_v``, ``tau``, the per-subject
verifiabilities, the blind-spot spread.

All randomness of an episode is drawn up front (:func:`draw_noise`) so that the scalar path
(:class:`topo_env.sim.team.SimTeamBackend`, used by the env) and the vectorised path
(:class:`topo_env.sim.batch.BatchSimulator`) compute the same episode from the same draws, whatever
order calls are made in. This module holds the scalar path; the batch module mirrors it with numpy.
"""
from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from topo_env.sim.profiles import SimProfile

# Layout of one call's noise vector: 6 uniforms, 4 normals, then one Gumbel per answer label.
U_SOLVE, U_WRONG, U_TRAP, U_VERIFY, U_CODE, U_DRIFT, Z_CONF_ATT, Z_CONF_OUT, Z_CONTENT, Z_REASON, G0 = range(11)
N_UNIFORM, N_NORMAL = 6, 4
TRAP_LABEL = 1
VERDICT_NONE, VERDICT_PASS, VERDICT_FAIL = 0, 1, -1


def noise_width(profile: SimProfile) -> int:
    """Length of one call's noise vector: 10 scalars + one Gumbel per answer label."""
    return G0 + profile.n_wrong + 1


@dataclass(frozen=True)
class EpisodeNoise:
    """Pre-drawn randomness for B episodes.

    ``calls[b, t, i, k]``: noise of agent i's call in round t, phase k (0: solo or draft,
    1: revise). ``decision[b]``: the decision node's call. ``blind[b, i]``: agent i's blind spot.
    """

    calls: np.ndarray  # (B, T, N, 2, L) float64
    decision: np.ndarray  # (B, L) float64
    blind: np.ndarray  # (B, N) float64

    def episode(self, b: int) -> "EpisodeNoise":
        return EpisodeNoise(self.calls[b : b + 1], self.decision[b : b + 1], self.blind[b : b + 1])

    def take(self, idx: np.ndarray) -> "EpisodeNoise":
        """The noise of episodes ``idx`` (repeats allowed: common random numbers)."""
        return EpisodeNoise(self.calls[idx], self.decision[idx], self.blind[idx])

    @classmethod
    def concatenate(cls, parts: list["EpisodeNoise"]) -> "EpisodeNoise":
        """The episodes of ``parts`` in order, as one batch (e.g. the noises of several env episodes)."""
        return cls(*(np.concatenate([getattr(x, f) for x in parts]) for f in ("calls", "decision", "blind")))


def draw_noise(rng: np.random.Generator, profile: SimProfile, batch: int, rounds: int, n_agents: int) -> EpisodeNoise:
    """Draw the noise of ``batch`` episodes in one go (the env draws with batch=1)."""
    width = noise_width(profile)
    shape = (batch, rounds * n_agents * 2 + 1)
    flat = np.concatenate(  # uniforms, normals, Gumbels: the order of the layout above
        [rng.random(shape + (N_UNIFORM,)), rng.standard_normal(shape + (N_NORMAL,)),
         rng.gumbel(size=shape + (width - G0,))], axis=-1
    )
    blind = rng.standard_normal((batch, n_agents))
    calls = flat[:, :-1].reshape(batch, rounds, n_agents, 2, width)
    return EpisodeNoise(calls=calls, decision=flat[:, -1], blind=blind)


def wrong_label_cdf(profile: SimProfile) -> list[float]:
    """Cumulative Zipf weights over the non-trap wrong labels 2..K (last entry exactly 1.0)."""
    w = [k ** -profile.wrong_zipf for k in range(1, profile.n_wrong)]
    total = sum(w)
    cdf, acc = [], 0.0
    for x in w:
        acc += x / total
        cdf.append(acc)
    cdf[-1] = 1.0
    return cdf


class TaskFeatures(NamedTuple):
    """What the model reads of a task: difficulty, hidden latent, prompt tokens, subject index."""

    difficulty: float
    latent: float
    prompt_tokens: int
    subject: int


class AgentFeatures(NamedTuple):
    """What the model reads of an agent in one episode: role, skill on the task's subject, blind spot
    (the episode's u_i), verbosity, and whether it plays an adversary."""

    role: str
    skill: float
    blind: float
    verbosity: float
    adversarial: bool


class SimOutput(NamedTuple):
    """One simulated output (label space) with its token cost."""

    label: int
    confidence: float
    content_tokens: int
    prompt_tokens: int
    completion_tokens: int
    reasoning_tokens: int


Input = tuple[int, float, int, int]
"""(label, confidence, content_tokens, verdict) of a message or own previous output."""


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def verdict_factor(profile: SimProfile, verdict: int) -> float:
    if verdict == VERDICT_PASS:
        return profile.verdict_pass_weight
    if verdict == VERDICT_FAIL:
        return profile.verdict_fail_weight
    return 1.0


def simulate_call(profile: SimProfile, cdf: list[float], task: TaskFeatures, agent: AgentFeatures,
                  previous: Input | None, messages: list[Input], noise: list[float]) -> SimOutput:
    """One agent call of the model above (scalar path). ``messages`` in sender order.

    The batch path (:meth:`topo_env.sim.batch.BatchSimulator._call_agent`) adds the same
    floating-point terms in the same order, so both give identical results."""
    p = profile
    role_off, rec_fac, content_fac = p.roles[agent.role]
    d, s = task.difficulty, task.subject
    failed = previous is not None and previous[3] == VERDICT_FAIL
    eta = (p.alpha + (p.subject_offsets[s] + agent.skill) + role_off - p.beta * (d - 0.5) + p.task_spread * task.latent
           + p.blind_spread * agent.blind)
    if failed:
        eta += p.debug_gain
    att = _attempt(p, cdf, eta, d, noise)
    c_att = _sigmoid((p.mu_correct if att == 0 else p.mu_wrong) + p.sigma_conf * noise[Z_CONF_ATT])
    committed = previous is not None and not failed
    if committed:
        own, own_weight = previous[0], p.w_commit * previous[1] * verdict_factor(p, previous[3])
    else:
        own, own_weight = att, p.w_fresh * c_att
    if agent.adversarial:
        own = TRAP_LABEL
    score = {own: own_weight}  # label -> summed raw weight, only for labels on the table
    total = own_weight
    shows_right = shows_trap = False
    for lab, conf_m, _, ver in messages:
        w = p.w_peer * conf_m * verdict_factor(p, ver)
        score[lab] = score.get(lab, 0.0) + w
        total += w
        shows_right = shows_right or lab == 0
        shows_trap = shows_trap or lab == TRAP_LABEL
    if agent.adversarial:
        label = TRAP_LABEL
    elif not messages:
        label = own
        if committed:
            if own == 0 and noise[U_DRIFT] < p.drift_cw:
                label = TRAP_LABEL
            elif own != 0 and noise[U_DRIFT] < p.drift_wc:
                label = 0
    else:
        v = p.verifiability[s]
        recognise = max(0.0, max(0.0, p.rho + p.rho_v * v) * (1.0 - p.rho_d * d) * rec_fac + agent.skill)
        pull = max(0.0, p.theta - p.theta_v * v) * d
        label, best = -1, -math.inf
        for a in sorted(score):  # lowest label wins exact ties, as numpy's argmax
            val = score[a]
            if a == 0 and shows_right:
                val += recognise
            elif a == TRAP_LABEL and shows_trap:
                val += pull
            val += p.tau * noise[G0 + a]
            if val > best:
                label, best = a, val
    support = score.get(label, 0.0) / total if total > 0.0 else 0.0
    conf = _sigmoid((p.mu_correct if label == 0 else p.mu_wrong) + p.kappa * (support - 0.5)
                    + p.sigma_conf * noise[Z_CONF_OUT])
    inputs = messages if previous is None else [previous] + messages
    if not committed:
        factor = 1.0
    elif messages:
        factor = p.revisit
    else:
        factor = p.reemit
    prompt, completion, content, reasoning = _tokens(p, content_fac, agent.verbosity, factor, task, inputs, label,
                                                     noise)
    return SimOutput(label, conf, content, prompt, completion, reasoning)


def _attempt(p: SimProfile, cdf: list[float], eta: float, d: float, noise: list[float]) -> int:
    if noise[U_SOLVE] < _sigmoid(eta):
        return 0
    if noise[U_TRAP] < min(1.0, p.trap_base + p.trap_slope * d):
        return TRAP_LABEL
    return bisect.bisect_right(cdf, noise[U_WRONG]) + 2


def _tokens(p: SimProfile, content_fac: float, verbosity: float, factor: float, task: TaskFeatures,
            inputs: list[Input], label: int, noise: list[float]) -> tuple[int, int, int, int]:
    """(prompt, completion, content, reasoning) tokens of one call (step 6 of the model)."""
    content = math.floor(p.content_mean * content_fac * math.exp(0.3 * noise[Z_CONTENT]) + 0.5)
    prompt = p.sys_tokens + task.prompt_tokens
    disagree = 0
    for x in inputs:
        prompt += p.header_tokens + x[2] + (p.verdict_tokens if x[3] != VERDICT_NONE else 0)
        if x[0] != label:
            disagree += 1
    share = disagree / len(inputs) if inputs else 0.0
    reasoning = math.floor(p.reason_mean * verbosity * (0.6 + 0.8 * task.difficulty) * (factor + p.conflict * share)
                           * math.exp(0.4 * noise[Z_REASON]) + 0.5)
    return prompt, content + reasoning, content, reasoning


def simulate_decision(profile: SimProfile, task: TaskFeatures, finals: list[Input], noise: list[float]) -> SimOutput:
    """The decision node's weighted vote over ``finals`` (step 7; scalar path)."""
    p = profile
    passed = {lab for lab, _, _, ver in finals if ver == VERDICT_PASS}
    score: dict[int, float] = {}
    total = 0.0
    for lab, conf, _, ver in finals:
        trust = p.contradicted_weight if (ver != VERDICT_PASS and any(a != lab for a in passed)) else 1.0
        w = conf * verdict_factor(p, ver) * trust
        score[lab] = score.get(lab, 0.0) + w
        total += w
    label, best = TRAP_LABEL, -math.inf
    for a in sorted(score):
        val = score[a] + p.decide_tau * noise[G0 + a]
        if val > best:
            label, best = a, val
    support = score.get(label, 0.0) / total if total > 0.0 else 0.0
    conf = _sigmoid((p.mu_correct if label == 0 else p.mu_wrong) + p.kappa * (support - 0.5)
                    + p.sigma_conf * noise[Z_CONF_OUT])
    _, _, content_fac = p.roles["decider"]
    prompt, completion, content, reasoning = _tokens(p, content_fac, 1.0, p.decide_factor, task, finals, label, noise)
    return SimOutput(label, conf, content, prompt, completion, reasoning)


def simulate_verdict(profile: SimProfile, label: int, noise: list[float], verifiability: float) -> int:
    """The verifier's verdict on an output with answer ``label`` on a subject of this verifiability
    (scalar path). The trap passes shallow checks: it is caught with probability verify_detect
    (1 + v_s) / 2."""
    p = profile
    if p.verifier is None or (p.verifier == "python" and noise[U_CODE] >= p.p_wrote_code):
        return VERDICT_NONE
    if label == 0:
        return VERDICT_PASS if noise[U_VERIFY] < p.verify_pass_correct else VERDICT_FAIL
    detect = p.verify_detect * min(max((1.0 + verifiability) / 2.0, 0.0), 1.0) if label == TRAP_LABEL else p.verify_detect
    return VERDICT_FAIL if noise[U_VERIFY] < detect else VERDICT_PASS
