"""The stochastic model of a simulated agent call (the documented model behind ``backend="sim"``).

Answers are labels: 0 is correct, 1 is the task's *trap* (the persuasive wrong answer), 2..K other
wrong answers (K = ``profile.n_wrong``, Zipf-weighted). Symbols: d the task's difficulty in [0, 1],
s its subject, z its hidden latent (N(0, 1), shared by every agent: the same blind spots), u_i agent
i's blind spot for the episode (N(0, 1), drawn once per episode), k_is agent i's skill on subject s
(:class:`topo_env.sim.profiles.AgentModel`), b_s and v_s the subject's offset and verifiability,
c a stated confidence, vf(verdict) = ``verdict_pass_weight`` / ``verdict_fail_weight`` / 1.
sigma(x) = 1 / (1 + e^-x).

One call of agent i (role r) shown its own previous output o (or nothing) and peer messages M
(:func:`simulate_call`; each step is the function named in its title):

1. **Attempt** (:func:`ability`, :func:`attempt`). eta = alpha + b_s + k_is + a_r - beta (d - 1/2)
   + task_spread z + blind_spread u_i (+ ``debug_gain`` when o failed verification: the agent re-solves
   with the failing tests in hand, Self-Debugging arXiv 2304.05128: up to +12% with unit tests).
   Correct with probability sigma(eta); a wrong attempt is the trap with probability
   min(1, trap_base + trap_slope d) (harder tasks fail the same way), else a Zipf-drawn other wrong
   label. c_att = sigma(mu + sigma_conf z1), mu = ``mu_correct`` or ``mu_wrong``.
2. **Own answer** (:func:`own_answer`). Without o, or when o failed verification, the agent holds its
   attempt with weight w = ``w_fresh`` c_att (not yet committed: anchoring is weak). Otherwise it
   holds o with w = ``w_commit`` c_o vf(o): later rounds *update* an answer, they do not re-solve it.
3. **Update** (:func:`on_the_table`, :func:`drift`, :func:`update`). No messages: the agent keeps its
   answer, except that a committed answer drifts (self-revision without new information, Huang et al.
   "Large Language Models Cannot Self-Correct Reasoning Yet": correct -> trap with ``drift_cw``,
   wrong -> correct with ``drift_wc``). With messages, every answer on the table scores

       S(a) = w [a = own] + w_peer sum_{m in M, a_m = a} c_m vf(m)
              + [a = 0 shown by a peer] (max(0, rho + rho_v v_s) (1 - rho_d d) f_r + k_is)^+
              + [a = trap shown by a peer] max(0, theta - theta_v v_s) d  +  tau G_a

   (G_a standard Gumbel) and the agent answers the best (on an exact tie, the first on the table:
   its own answer, then the senders in order). Conformity pulls toward the shown majority weighted by
   stated confidence and verdicts; a shown right answer is recognised where a derivation can be
   checked and on easier tasks, a shown trap persuades where it cannot and on harder ones (Du et al.
   arXiv 2305.14325; "Not All Flips Are Conformity" arXiv 2606.00820).
4. **Confidence out** (:func:`stated_confidence`). sigma(mu + kappa (support - 1/2) + sigma_conf z2),
   support the share of the raw weight (own and peers) behind the answer.
5. **Adversary** (in :func:`simulate_call`). Always answers the trap and never switches; its
   confidence is computed as an honest agent's holding the trap (no fingerprint); it costs tokens
   like anyone else.
6. **Tokens** (:func:`tokens`). prompt = sys + task + sum over inputs (header + content + verdict
   text): context grows with in-degree. completion = content + reasoning, content ~ content_mean
   f_content e^{0.3 z}, reasoning ~ reason_mean verbosity (0.6 + 0.8 d) (f + conflict * share of
   inputs disagreeing with the answer) e^{0.4 z} with f = 1 for an attempt, ``revisit`` when revising
   with new inputs, and ``reemit`` when nothing new was shown (the answer is re-emitted almost free).
6b. **A small model's slips** (:func:`slip`; every probability 0 in the built-in profiles, fitted from a
   team's traces). A committed answer revised with messages is, with ``p_invent``, replaced by an answer
   nobody proposed (a Zipf-drawn other wrong label); the decision node does the same with
   ``p_invent_decide``; any honest reply has, with ``p_unreadable`` (the decision node's with
   ``p_unreadable_decide``), no readable answer (label :data:`NO_ANSWER`: scored wrong, on no table, not
   counted by a vote; an agent whose own previous reply had none solves afresh). Fitted to 3,988 calls of
   three SmolLM2-135M agents (docs/results.md, "A real small-model team"): 12% of revisions and 6% of
   decisions name a number nobody proposed; 2% of the agents' replies and 9% of decisions name none.
7. **Decision node** (:func:`simulate_decision`). A weighted vote over the finals:
   S(a) = sum_j c_j vf(j) t_j [a_j = a] + ``decide_tau`` G_a, with t_j = ``contradicted_weight`` when
   an agent whose answer passed verification holds another answer (and j did not pass), else 1.
   "Debate or Vote" (arXiv 2508.17536): most of a team's gain is the vote; debate alone is close to a
   martingale.

Verification (execute_verify, :func:`simulate_verdict`): code checks pass a correct program with
probability ``verify_pass_correct`` and catch a wrong one with ``verify_detect``, the trap only with
``verify_detect`` (1 + v_s) / 2: the plausible wrong program is the one that passes shallow visible
tests, and more so where the subject's checks are shallow (EvalPlus, arXiv 2305.01210: HumanEval's own
tests let many wrong programs pass); math checks work the same but only when the agent wrote code
(``p_wrote_code``), else no verdict; reasoning has no verifier.

Pinned by publications: the calibration targets (Table 1 / Table 3, :mod:`topo_env.sim.calibrate`),
the conformity rates and their correct -> wrong share (``tests/test_sim_model.py``), self-revision
drifting down, verification gains. Not pinned by any published figure: the anchoring weight
``w_fresh``, the verifiability strengths ``rho_v`` / ``theta_v``, ``tau``, the per-subject
verifiabilities, the blind-spot spread.

Each behaviour above is written once, here, over ``xp`` (:mod:`topo_env.sim.numerics`): the
per-episode path (:class:`topo_env.sim.team.SimTeamBackend`, the env's backend) calls it on one call's
Python numbers (``xp=SCALARS``), the batch path (:class:`topo_env.sim.batch.BatchSimulator`) on arrays
with one entry per episode (``xp=ARRAYS``). A new behaviour goes here, once, for both. All randomness of
an episode is drawn up front (:func:`draw_noise`), so both paths compute the same episode from the same
draws, whatever order calls are made in.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from topo_env.sim.profiles import SimProfile

# Layout of one call's noise vector: 6 uniforms, 4 normals, then one Gumbel per answer label.
U_SOLVE, U_WRONG, U_TRAP, U_VERIFY, U_CODE, U_DRIFT, Z_CONF_ATT, Z_CONF_OUT, Z_CONTENT, Z_REASON, G0 = range(11)
N_UNIFORM, N_NORMAL = 6, 4
TRAP_LABEL = 1
NO_ANSWER = -1  # a reply with no readable answer (step 6b)
# Step 6b's uniforms follow the Gumbels, drawn only for a profile with slips (:func:`has_slips`), so that a
# team without them plays exactly the episodes it played before they existed.
U_INVENT, U_INVENT_LABEL, U_UNREADABLE = -3, -2, -1
N_SLIP_UNIFORMS = 3
SLIPS = ("p_invent", "p_invent_decide", "p_unreadable", "p_unreadable_decide")
"""The profile's probabilities of step 6b."""
VERDICT_NONE, VERDICT_PASS, VERDICT_FAIL = 0, 1, -1


def has_slips(profile: SimProfile) -> bool:
    """Whether ``profile`` has any of step 6b's slips (a probability above 0)."""
    return any(getattr(profile, name) > 0.0 for name in SLIPS)


def noise_width(profile: SimProfile) -> int:
    """Length of one call's noise vector: 10 scalars + one Gumbel per answer label (+ step 6b's uniforms)."""
    return G0 + profile.n_wrong + 1 + (N_SLIP_UNIFORMS if has_slips(profile) else 0)


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
    labels = profile.n_wrong + 1
    shape = (batch, rounds * n_agents * 2 + 1)
    flat = np.concatenate(  # uniforms, normals, Gumbels: the order of the layout above
        [rng.random(shape + (N_UNIFORM,)), rng.standard_normal(shape + (N_NORMAL,)),
         rng.gumbel(size=shape + (labels,))], axis=-1
    )
    blind = rng.standard_normal((batch, n_agents))
    if has_slips(profile):
        flat = np.concatenate([flat, rng.random(shape + (N_SLIP_UNIFORMS,))], axis=-1)
    width = flat.shape[-1]
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
    """What the model reads of a task: Python numbers for one episode, or (m,) arrays for m episodes."""

    difficulty: float  # d in [0, 1]
    latent: float  # z ~ N(0, 1), shared by every agent
    prompt_tokens: int
    verifiability: float  # v_s of the task's subject, in [-1, 1]


class AgentFeatures(NamedTuple):
    """What the model reads of agent i in one episode (Python numbers, or (m,) arrays over m episodes):
    its role, strength b_s + k_is and skill k_is on the task's subject (logits), blind spot u_i,
    verbosity, and whether it plays an adversary."""

    role: str
    strength: float
    skill: float
    blind: float
    verbosity: float
    adversarial: bool


class Input(NamedTuple):
    """A message, or the agent's own previous output, as the model reads it: answer label, stated
    confidence, content tokens, verdict (``VERDICT_*``). Python numbers or (m,) arrays."""

    label: int
    conf: float
    content: int
    verdict: int


Shown = tuple[object, Input]
"""(shown, input): ``shown`` is True on the per-episode path, or the (m,) bool mask of the rows that see the input."""


class SimOutput(NamedTuple):
    """One simulated output (label space) with its token cost; Python numbers or (m,) arrays."""

    label: int
    confidence: float
    content_tokens: int
    prompt_tokens: int
    completion_tokens: int
    reasoning_tokens: int


class Table(NamedTuple):
    """The answers on the table of one update (step 3), slot by slot: the agent's own answer (slot 0),
    then each shown input in sender order."""

    labels: list  # per slot: its answer label (-1 where not shown)
    present: list  # per slot: whether it is shown (True, or an (m,) bool mask)
    scores: list  # per slot: the summed raw weight of the slots holding its label
    total: object  # the summed raw weight of all slots
    shows_right: object  # a peer shows answer 0
    shows_trap: object  # a peer shows the trap
    has_messages: object  # some peer input is shown


def sigmoid(xp, x):
    """sigma(x) = 1 / (1 + e^-x)."""
    return 1.0 / (1.0 + xp.exp(-x))


def verdict_factor(profile: SimProfile, verdict):
    """vf(verdict): ``verdict_pass_weight``, ``verdict_fail_weight`` or 1. Written so that Python
    numbers and arrays alike give exactly that value: only one of the three terms is non-zero."""
    return (profile.verdict_pass_weight * (verdict == VERDICT_PASS)
            + profile.verdict_fail_weight * (verdict == VERDICT_FAIL) + (verdict == VERDICT_NONE))


def ability(xp, p: SimProfile, task: TaskFeatures, agent: AgentFeatures, role_offset: float, failed):
    """Step 1: the logit eta of solving (with ``debug_gain`` where the own previous output failed)."""
    eta = (p.alpha + agent.strength + role_offset - p.beta * (task.difficulty - 0.5) + p.task_spread * task.latent
           + p.blind_spread * agent.blind)
    if xp.any(failed):
        eta = eta + xp.where(failed, p.debug_gain, 0.0)
    return eta


def attempt(xp, p: SimProfile, cdf, eta, difficulty, noise):
    """Step 1: the attempt's label: 0 with probability sigma(eta), else the trap with probability
    min(1, trap_base + trap_slope d), else an other wrong label drawn by ``cdf`` (:func:`wrong_label_cdf`)."""
    trap = noise[U_TRAP] < xp.minimum(1.0, p.trap_base + p.trap_slope * difficulty)
    other = xp.bucket(cdf, noise[U_WRONG]) + 2
    return xp.where(noise[U_SOLVE] < sigmoid(xp, eta), 0, xp.where(trap, TRAP_LABEL, other))


def stated_confidence(xp, p: SimProfile, label, z, support=None):
    """Step 4: sigma(mu + kappa (support - 1/2) + sigma_conf z), mu by whether ``label`` is right;
    without ``support``, the attempt's c_att = sigma(mu + sigma_conf z) (step 1)."""
    mu = xp.where(label == 0, p.mu_correct, p.mu_wrong)
    if support is None:
        return sigmoid(xp, mu + p.sigma_conf * z)
    return sigmoid(xp, mu + p.kappa * (support - 0.5) + p.sigma_conf * z)


def own_answer(xp, p: SimProfile, attempt_label, attempt_conf, previous: Input | None, committed):
    """Step 2: (own answer, its weight w): the attempt with ``w_fresh`` c_att, or where ``committed``
    the previous output with ``w_commit`` c_o vf(o)."""
    fresh = p.w_fresh * attempt_conf
    if previous is None:
        return attempt_label, fresh
    return (xp.where(committed, previous.label, attempt_label),
            xp.where(committed, p.w_commit * previous.conf * verdict_factor(p, previous.verdict), fresh))


def on_the_table(xp, p: SimProfile, own, own_weight, shown: list[Shown]) -> Table:
    """Step 3's slots: the own answer with weight w, each shown peer m with w_peer c_m vf(m)."""
    labels, weights, present = [own], [own_weight], [True]
    shows_right = shows_trap = has_messages = False
    for shown_mask, message in shown:
        mask = shown_mask & (message.label != NO_ANSWER)  # a reply without an answer puts none on the table
        label = xp.where(mask, message.label, -1)
        labels.append(label)
        weights.append(xp.where(mask, p.w_peer * message.conf * verdict_factor(p, message.verdict), 0.0))
        present.append(mask)
        shows_right = shows_right | (label == 0)
        shows_trap = shows_trap | (label == TRAP_LABEL)
        has_messages = has_messages | mask
    return Table(labels, present, _slot_scores(labels, weights), sum(weights, 0.0), shows_right, shows_trap,
                 has_messages)


def drift(xp, p: SimProfile, own, committed, u):
    """Step 3 without messages: the own answer is kept, but a committed one drifts (correct -> trap
    when u < ``drift_cw``, wrong -> correct when u < ``drift_wc``)."""
    return xp.where(committed & (own == 0) & (u < p.drift_cw), TRAP_LABEL,
                    xp.where(committed & (own != 0) & (u < p.drift_wc), 0, own))


def update(xp, p: SimProfile, task: TaskFeatures, agent: AgentFeatures, recognition_factor: float, own, committed,
           table: Table, noise):
    """Step 3: the answer after the update, and the raw weight behind it (the numerator of the
    support): :func:`drift` without messages, else the best S(a) on the table."""
    label = drift(xp, p, own, committed, noise[U_DRIFT])
    behind = xp.where(label == own, table.scores[0], 0.0)
    if xp.any(table.has_messages):
        v, d = task.verifiability, task.difficulty
        recognise = xp.maximum(0.0, xp.maximum(0.0, p.rho + p.rho_v * v) * (1.0 - p.rho_d * d) * recognition_factor
                               + agent.skill)
        pull = xp.maximum(0.0, p.theta - p.theta_v * v) * d
        # S(a) of each slot's answer a, the Iverson brackets of the equation as 0/1 factors
        values = [(score + recognise * ((a == 0) & table.shows_right) + pull * ((a == TRAP_LABEL) & table.shows_trap))
                  + p.tau * xp.pick(noise, G0 + a) for a, score in zip(table.labels, table.scores)]
        voted, voted_weight = _best_slot(xp, table.labels, table.present, values, table.scores, 0)
        label = xp.where(table.has_messages, voted, label)
        behind = xp.where(table.has_messages, voted_weight, behind)
    return label, behind


def tokens(xp, p: SimProfile, content_factor: float, verbosity: float, reasoning_factor, task: TaskFeatures,
           inputs: list[Shown], label, noise):
    """Step 6: (prompt, completion, content, reasoning) tokens of one call that read ``inputs`` and
    answered ``label``; ``reasoning_factor`` is f (1, ``revisit`` or ``reemit``)."""
    n_inputs = disagree = context = 0
    for mask, x in inputs:
        n_inputs = n_inputs + mask
        disagree = disagree + (mask & (x.label != label))
        context = context + mask * (p.header_tokens + x.content + p.verdict_tokens * (x.verdict != VERDICT_NONE))
    share = disagree / xp.maximum(n_inputs, 1)  # 0 without inputs
    content = xp.floor_int(p.content_mean * content_factor * xp.exp(0.3 * noise[Z_CONTENT]) + 0.5)
    reasoning = xp.floor_int(p.reason_mean * verbosity * (0.6 + 0.8 * task.difficulty)
                             * (reasoning_factor + p.conflict * share) * xp.exp(0.4 * noise[Z_REASON]) + 0.5)
    prompt = p.sys_tokens + task.prompt_tokens + context
    return prompt, content + reasoning, content, reasoning


def slip(xp, cdf, label, noise, p_invent: float, inventing, p_unreadable: float, honest):
    """Step 6b: ``label`` after a small model's slips: where ``inventing``, with probability ``p_invent``
    an answer nobody proposed (a Zipf-drawn other wrong label, :func:`wrong_label_cdf`); then, where
    ``honest``, with probability ``p_unreadable`` no readable answer (:data:`NO_ANSWER`)."""
    if p_invent > 0.0:
        invented = xp.bucket(cdf, noise[U_INVENT_LABEL]) + 2
        label = xp.where(inventing & (noise[U_INVENT] < p_invent), invented, label)
    if p_unreadable > 0.0:
        label = xp.where(honest & (noise[U_UNREADABLE] < p_unreadable), NO_ANSWER, label)
    return label


def simulate_call(xp, p: SimProfile, cdf, task: TaskFeatures, agent: AgentFeatures, previous: Input | None,
                  shown: list[Shown], noise) -> SimOutput:
    """One call of an agent (steps 1-6) shown its own previous output ``previous`` (or None) and the
    peer inputs ``shown`` in sender order; ``noise`` the call's noise (:mod:`topo_env.sim.numerics`)."""
    role_offset, recognition_factor, content_factor = p.roles[agent.role]
    if previous is None:
        failed = committed = False
    else:
        failed = previous.verdict == VERDICT_FAIL
        committed = xp.logical_not(failed) & (previous.label != NO_ANSWER)  # no answer to hold: solve afresh
    attempt_label = attempt(xp, p, cdf, ability(xp, p, task, agent, role_offset, failed), task.difficulty, noise)
    own, own_weight = own_answer(xp, p, attempt_label, stated_confidence(xp, p, attempt_label, noise[Z_CONF_ATT]),
                                 previous, committed)
    adversary = xp.any(agent.adversarial)
    if adversary:  # step 5: the adversary holds the trap ...
        own = xp.where(agent.adversarial, TRAP_LABEL, own)
    table = on_the_table(xp, p, own, own_weight, shown)
    label, behind = update(xp, p, task, agent, recognition_factor, own, committed, table, noise)
    if adversary:  # ... and never switches
        label = xp.where(agent.adversarial, TRAP_LABEL, label)
        behind = xp.where(agent.adversarial, table.scores[0], behind)
    if p.p_invent > 0.0 or p.p_unreadable > 0.0:
        honest = xp.logical_not(agent.adversarial)
        slipped = slip(xp, cdf, label, noise, p.p_invent, committed & table.has_messages & honest, p.p_unreadable,
                       honest)
        behind = xp.where(slipped == label, behind, 0.0)  # nothing on the table stands behind a slip
        label = slipped
    confidence = stated_confidence(xp, p, label, noise[Z_CONF_OUT], _share(xp, behind, table.total))
    factor = xp.where(committed, xp.where(table.has_messages, p.revisit, p.reemit), 1.0)
    inputs = shown if previous is None else [(True, previous)] + shown
    prompt, completion, content, reasoning = tokens(xp, p, content_factor, agent.verbosity, factor, task, inputs,
                                                    label, noise)
    return SimOutput(label, confidence, content, prompt, completion, reasoning)


def simulate_decision(xp, p: SimProfile, cdf, task: TaskFeatures, finals: list[Shown], noise) -> SimOutput:
    """Step 7: the decision node's weighted vote over the agents' last outputs ``finals`` (those with an
    answer), then its slips (step 6b). Every final's text is read (its tokens count)."""
    answered = [(mask & (x.label != NO_ANSWER), x) for mask, x in finals]
    passed = [mask & (x.verdict == VERDICT_PASS) for mask, x in answered]
    labels, weights, present = [], [], []
    for mask, x in answered:
        contradicted = False  # another answer passed verification
        for (_, other), other_passed in zip(finals, passed):
            contradicted = contradicted | (other_passed & (other.label != x.label))
        trust = xp.where((x.verdict != VERDICT_PASS) & contradicted, p.contradicted_weight, 1.0)
        labels.append(xp.where(mask, x.label, -1))
        weights.append(xp.where(mask, x.conf * verdict_factor(p, x.verdict) * trust, 0.0))
        present.append(mask)
    scores = _slot_scores(labels, weights)
    values = [score + p.decide_tau * xp.pick(noise, G0 + label) for label, score in zip(labels, scores)]
    label, behind = _best_slot(xp, labels, present, values, scores, xp.full(noise[G0], TRAP_LABEL))
    if p.p_invent_decide > 0.0 or p.p_unreadable_decide > 0.0:
        slipped = slip(xp, cdf, label, noise, p.p_invent_decide, True, p.p_unreadable_decide, True)
        behind = xp.where(slipped == label, behind, 0.0)
        label = slipped
    confidence = stated_confidence(xp, p, label, noise[Z_CONF_OUT], _share(xp, behind, sum(weights, 0.0)))
    _, _, content_factor = p.roles["decider"]
    prompt, completion, content, reasoning = tokens(xp, p, content_factor, 1.0, p.decide_factor, task, finals, label,
                                                    noise)
    return SimOutput(label, confidence, content, prompt, completion, reasoning)


def simulate_vote(xp, finals: list[Shown], senders: list[int], agent: int | None, like) -> SimOutput:
    """A decision without a decision node (``env.decision``, :mod:`topo_env.engine.decision`): a
    plurality vote over the finals' labels (self-consistency; "Debate or Vote", Choi et al. 2025),
    ties broken by the summed stated confidence of the label's voters, then by the lowest agent index
    holding it (the first slot: ``finals`` are in agent order); with ``agent`` K, agent K's final where
    it is shown, else the vote. ``senders[c]``: the agent of slot c. A final without an answer
    (:data:`NO_ANSWER`) is not counted. The picked slot's label and confidence; label -1 (scored wrong)
    where no slot with an answer is shown (shaped as ``like``). No call: no tokens."""
    finals = [(mask & (x.label != NO_ANSWER), x) for mask, x in finals]
    labels = [xp.where(mask, x.label, -1) for mask, x in finals]
    counts = _slot_scores(labels, [xp.where(mask, 1.0, 0.0) for mask, _ in finals])
    confs = _slot_scores(labels, [xp.where(mask, x.conf, 0.0) for mask, x in finals])
    best_count, best_conf, label, conf = -1.0, -math.inf, xp.full(like, -1), xp.full(like, 0.0)
    for (mask, x), count, summed in zip(finals, counts, confs):
        better = mask & ((count > best_count) | ((count == best_count) & (summed > best_conf)))
        best_count, best_conf = xp.where(better, count, best_count), xp.where(better, summed, best_conf)
        label, conf = xp.where(better, x.label, label), xp.where(better, x.conf, conf)
    if agent is not None:
        for (mask, x), sender in zip(finals, senders):
            if sender == agent:
                label, conf = xp.where(mask, x.label, label), xp.where(mask, x.conf, conf)
    zero = xp.full(like, 0)
    return SimOutput(label, conf, zero, zero, zero, zero)


def simulate_verdict(xp, p: SimProfile, label, noise, verifiability):
    """The verifier's verdict (``VERDICT_*``) on an output answering ``label``, on a subject of this
    verifiability. The trap passes shallow checks: it is caught with probability verify_detect (1 + v_s) / 2."""
    if p.verifier is None:
        return xp.full(label, VERDICT_NONE)
    detect = xp.where(label == TRAP_LABEL, p.verify_detect * xp.clip((1.0 + verifiability) / 2.0, 0.0, 1.0),
                      p.verify_detect)
    u = noise[U_VERIFY]
    verdict = xp.where(label == 0, xp.where(u < p.verify_pass_correct, VERDICT_PASS, VERDICT_FAIL),
                       xp.where(u < detect, VERDICT_FAIL, VERDICT_PASS))
    if p.verifier == "python":  # a maths check needs code: no verdict where the agent wrote none
        verdict = xp.where(noise[U_CODE] < p.p_wrote_code, verdict, VERDICT_NONE)
    return verdict


def _slot_scores(labels: list, weights: list) -> list:
    """Per slot c, sum_s w_s [l_s = l_c]: the summed weight of the slots holding its label, in slot order."""
    scores = []
    for label in labels:
        score = 0.0
        for other, weight in zip(labels, weights):
            score = score + weight * (other == label)
        scores.append(score)
    return scores


def _best_slot(xp, labels: list, present: list, values: list, scores: list, default):
    """The label of the present slot of highest value (the first such slot on exact ties) and that
    slot's score; ``default`` and 0 where no slot is present. A hidden slot's value is never read (its
    label -1 picks the noise entry G0 - 1 instead of a Gumbel)."""
    best_value, best_label, best_score = -math.inf, default, 0.0
    for label, shown, value, score in zip(labels, present, values, scores):
        better = shown & (value > best_value)
        best_value = xp.where(better, value, best_value)
        best_label = xp.where(better, label, best_label)
        best_score = xp.where(better, score, best_score)
    return best_label, best_score


def _share(xp, part, total):
    """part / total, 0 where total is 0."""
    return xp.where(total > 0.0, part / xp.where(total > 0.0, total, 1.0), 0.0)
