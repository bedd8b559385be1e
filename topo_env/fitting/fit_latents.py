"""What the traces do not carry: each task's difficulty and its trap, inferred as latent variables.

A real team's traces hold a task's prompt, reference and the dataset's public fields, never the
simulator's difficulty d or trap answer (:class:`topo_env.engine.tasks.Task`'s ``hidden``). The fit
treats both as latent per task and integrates them out:

* **Difficulty** (:func:`difficulty_evidence`). d has the base's prior Beta(diff_a, diff_b), taken on
  :data:`N_D` quantile nodes. The model ties d to what every call returns (:mod:`topo_env.sim.model`):
  a fresh attempt's reasoning tokens are reason_mean verbosity_i (0.6 + 0.8 d) e^{0.4 eps}, and a task's
  prompt length is task_tokens_mean (0.7 + 0.6 d) e^{0.2 eps}. On the log scale each agent's level
  (reason_mean verbosity_i) is estimated with the task's posterior, the noise SD from the spread
  *within* a task (where d is shared: no assumption about d), the prompt's noise from what its spread
  leaves over the prior's. The result is a per-task log-likelihood over the nodes; the attempt model
  (:class:`topo_env.fitting.fit_ability.AttemptModel`) multiplies it by its attempts' likelihood, with
  the task latent z, so beta and task_spread are fitted with d integrated out, and every other part
  of the fit reads the posterior mean.
* **Trap** (:func:`fit_latent_trap`). A wrong attempt is the task's trap with probability
  q = min(1, trap_base + trap_slope d), else one of the other wrong answers (Zipf over ``n_wrong - 1``
  labels, here uniform over their effective number 1 / sum p^2, which keeps the chance that two other
  wrong attempts agree). The trap is one of the task's distinct wrong attempts or none seen; the
  likelihood of its wrong attempts sums over these hypotheses. trap_base and trap_slope maximise it
  (standard errors from the Hessian), and each task's trap becomes its most probable hypothesis
  (:meth:`topo_env.fitting.fit_data.Data.set_trap`). Taking the most common wrong attempt as the trap
  instead reads every task with a single wrong attempt as a trap and inflates P(trap | wrong).

Tasks whose traces give the difficulty or the trap (a dataset's own level) keep it.
"""
from __future__ import annotations

import math
from collections import Counter

import numpy as np

from topo_env.fitting.fit_stats import hessian, softmax, std_errors
from topo_env.sim.profiles import SimProfile

N_D = 12  # quantile nodes of the difficulty prior
MIN_SD = 0.05  # the smallest noise SD on the log scale the evidence uses (a deterministic link is not believed)


def difficulty_nodes(base: SimProfile) -> np.ndarray:
    """(N_D,) the prior's quantile midpoints: equally weighted nodes of Beta(diff_a, diff_b)."""
    from scipy.stats import beta as beta_dist

    return beta_dist.ppf((np.arange(N_D) + 0.5) / N_D, base.diff_a, base.diff_b)


def _log_normal_evidence(x: np.ndarray, level: np.ndarray, link: np.ndarray, sd: float) -> np.ndarray:
    """(n, G) log N(x - level; link_g, sd) up to a constant, per observation and node."""
    return -0.5 * ((x - level)[:, None] - link[None, :]) ** 2 / sd ** 2


def difficulty_evidence(data, base: SimProfile, nodes: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """(T, G) log-likelihood of each task's token observations at each difficulty node (zero where
    nothing informs it), and notes on what was used. ``data`` is a :class:`~topo_env.fitting.fit_data.Data`."""
    n_tasks, notes = len(data.tasks), []
    evidence = np.zeros((n_tasks, len(nodes)))
    prior_post = np.full((n_tasks, len(nodes)), 1.0 / len(nodes))

    # fresh attempts' reasoning tokens: log r = level_i + log(0.6 + 0.8 d) + sd eps
    fresh = [c for c in data.calls if c.prev is None and not c.msgs and c.reasoning > 0]
    if len(fresh) >= 30:
        x = np.log([c.reasoning for c in fresh])
        task = np.array([c.task for c in fresh])
        agent = np.array([c.agent for c in fresh])
        link = np.log(0.6 + 0.8 * nodes)
        sd = _within_task_sd(x, task, agent)
        if sd is not None:
            post = prior_post
            for _ in range(4):  # agent levels given the posterior, the posterior given the levels
                e_link = post[task] @ link
                counts = np.bincount(agent, minlength=data.n_agents)
                level = np.bincount(agent, weights=x - e_link, minlength=data.n_agents) / np.maximum(counts, 1)
                ev = np.zeros_like(evidence)
                np.add.at(ev, task, _log_normal_evidence(x, level[agent], link, sd))
                post = softmax(ev, axis=1)
            evidence += ev
            notes.append(f"task difficulty: inferred from {len(fresh)} fresh attempts' reasoning tokens (noise SD "
                         f"{sd:.2f} on the log scale, from the spread within tasks)")

    # the task's prompt length: log T = level + log(0.7 + 0.6 d) + sd eps
    rows = [(j, t.prompt_tokens) for j, t in enumerate(data.tasks) if t.prompt_tokens and t.prompt_tokens > 0]
    if len(rows) >= 30:
        j = np.array([r[0] for r in rows])
        y = np.log([r[1] for r in rows], dtype=float)
        link = np.log(0.7 + 0.6 * nodes)
        level = y.mean() - link.mean()
        sd = math.sqrt(max(y.var() - link.var(), MIN_SD ** 2))
        evidence[j] += _log_normal_evidence(y, np.full(len(y), level), link, sd)
        notes.append(f"task difficulty: also from {len(rows)} tasks' prompt lengths (noise SD {sd:.2f} on the log scale)")
    return evidence, notes


def _within_task_sd(x: np.ndarray, task: np.ndarray, agent: np.ndarray) -> float | None:
    """The pooled SD of ``x`` around its (task, agent) cell means after removing each agent's mean:
    the noise of one observation where the task's difficulty is shared. None without repeats."""
    _, of_agent = np.unique(agent, return_inverse=True)
    x = x - (np.bincount(of_agent, weights=x) / np.bincount(of_agent))[of_agent]  # each agent's level away
    keys = task.astype(np.int64)
    _, inv, counts = np.unique(keys, return_inverse=True, return_counts=True)
    means = np.bincount(inv, weights=x) / counts
    dof = len(x) - len(counts)
    if dof < 20:
        return None
    return max(float(np.sqrt(((x - means[inv]) ** 2).sum() / dof)), MIN_SD)


# ---------------------------------------------------------------------------------------------
# the trap


def effective_others(p: SimProfile) -> float:
    """1 / sum p_k^2 of the Zipf weights over the non-trap wrong labels (at least 1)."""
    w = np.array([k ** -p.wrong_zipf for k in range(1, p.n_wrong)], dtype=float)
    if not len(w):
        return 1.0
    w /= w.sum()
    return float(1.0 / (w ** 2).sum())


def _hypotheses(counts: list[int], others: float) -> tuple[np.ndarray, np.ndarray]:
    """For a task's wrong attempts grouped by answer (``counts``, r groups): per hypothesis h (the
    trap is group h, or none seen: h = r) the trap's count n_h and the log-probability of the other
    groups' pattern under a uniform draw over ``others`` labels."""
    r, total = len(counts), sum(counts)

    def pattern(groups: int, n: int) -> float:  # [M]_groups / M^n, M = others (half a label at least)
        return sum(math.log(max(others - i, 0.5)) for i in range(groups)) - n * math.log(others)

    n_trap = np.array(counts + [0], dtype=float)
    log_rest = np.array([pattern(r - 1, total - c) for c in counts] + [pattern(r, total)])
    return n_trap, log_rest


def fit_latent_trap(data, calls, base: SimProfile, report) -> None:
    """trap_base and trap_slope with each task's trap a latent choice among its wrong attempts (or none
    seen), then every such task's trap set to its most probable choice. Tasks whose trap the traces
    name count with that trap. ``calls`` are the attempts; ``report`` gets the two rows."""
    from scipy.optimize import minimize

    wrong = [c for c in calls if c.label != 0]
    if len(wrong) < 30:
        report.keep("trap_base", len(wrong), "too few wrong attempts")
        report.keep("trap_slope", len(wrong), "too few wrong attempts")
        return
    by_task: dict[int, Counter] = {}
    for c in wrong:
        by_task.setdefault(c.task, Counter())[c.label] += 1
    others = effective_others(base)
    tasks, d, n_wrong, hyp_n, hyp_rest, hyp_label = [], [], [], [], [], []
    for j, counter in by_task.items():
        labels = sorted(counter)
        counts = [counter[a] for a in labels]
        if data.trap_known[j]:  # the traces name it: one hypothesis
            n_t = counter.get(1, 0)
            n, rest, hyp = np.array([float(n_t)]), np.array([0.0]), [1]
        else:
            n, rest = _hypotheses(counts, others)
            hyp = labels + [None]
        tasks.append(j), d.append(data.difficulty[j]), n_wrong.append(sum(counts))
        hyp_n.append(n), hyp_rest.append(rest), hyp_label.append(hyp)
    d, n_wrong = np.array(d), np.array(n_wrong, dtype=float)
    width = max(len(h) for h in hyp_n)
    N = np.full((len(tasks), width), 0.0)
    R = np.full((len(tasks), width), -np.inf)
    for k, (n, rest) in enumerate(zip(hyp_n, hyp_rest)):
        N[k, :len(n)], R[k, :len(n)] = n, rest

    def per_hypothesis(t):
        q = np.clip(t[0] + t[1] * d, 1e-6, 1 - 1e-6)[:, None]
        return N * np.log(q) + (n_wrong[:, None] - N) * np.log1p(-q) + R

    def nll(t):
        ll = per_hypothesis(t)
        m = ll.max(axis=1, keepdims=True)
        return -float((m[:, 0] + np.log(np.exp(ll - m).sum(axis=1))).sum())

    starts = [np.array([base.trap_base, base.trap_slope]), np.array([0.3, 0.3]), np.array([0.6, 0.0])]
    res = min((minimize(nll, x0, method="Nelder-Mead", options={"xatol": 1e-6, "fatol": 1e-8, "maxiter": 2000})
               for x0 in starts), key=lambda r: r.fun)
    se, cov = std_errors(hessian(nll, res.x, step=1e-4))
    report.set("trap_base", res.x[0], se[0], len(wrong), "wrong attempts, the trap latent per task")
    report.set("trap_slope", res.x[1], se[1], len(wrong), "wrong attempts, the trap latent per task")
    report.block(["trap_base", "trap_slope"], cov)

    best = per_hypothesis(res.x).argmax(axis=1)
    moved = 0
    for k, j in enumerate(tasks):
        if data.trap_known[j]:
            continue
        choice = hyp_label[k][best[k]]
        if choice != 1:
            data.set_trap(j, choice)
            moved += 1
    unseen = sum(1 for k, j in enumerate(tasks) if not data.trap_known[j] and hyp_label[k][best[k]] is None)
    report.notes.append(f"the trap of {sum(not data.trap_known[j] for j in tasks)} task(s) inferred as a latent answer "
                        f"(trap_base + trap_slope d over the task's wrong attempts; {unseen} with the trap not among "
                        f"them, {moved} moved from their most common wrong attempt)")
