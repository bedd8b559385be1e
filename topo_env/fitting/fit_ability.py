"""The attempts' parameters: each agent's ability per subject, the difficulty slope, the task and blind-spot
spreads, the debug gain and the trap's share of wrong attempts.

Contract
--------
``fit_ability(data, base, attempts, report) -> (model, skills, shrink)``: ``attempts`` are the honest
calls of :class:`~topo_env.fitting.fit_data.Data` shown no message and holding no committed own answer
(round 0's first call, or a re-solve after a failed verification). It writes to ``report`` the rows
alpha, ``subject_offset[s]``, ``skill_dev[i,s]``, beta, task_spread, blind_spread, debug_gain,
trap_base and trap_slope (each fitted or kept from ``base``) and returns the fitted
:class:`AttemptModel` (None with fewer than ``MIN_CALLS`` attempts), the (N, S) skill matrix k_is the
update fit's recognition term uses (the shrunk deviations; the base's without a model) and the
deviations' :class:`Shrinkage` (None without a model).

The model: P(correct) = sigma(eta), eta = alpha + b_s + k_is + a_r - beta (d - 1/2) + debug_gain [failed]
+ task_spread z + blind_spread u_i. z is integrated out per task (all the task's attempts in every
episode share it) and u_i per (episode, agent) with Gauss-Hermite quadrature; so is d where the traces do
not give it (its prior's quantile nodes weighted by the task's token evidence, :mod:`topo_env.fitting.fit_latents`),
after which ``data.difficulty`` holds its posterior mean. It fits the per-(agent,
subject) level alpha + b_s + k_is, beta, task_spread (identified by several attempts on one task),
blind_spread (only when one agent attempts a task twice in an episode, >= :data:`MIN_REPEATS` times;
else kept), debug_gain (when re-solves exist). Gauge: the frequency-weighted mean of the fitted
subjects' b_s and the team-average skill per subject stay at the base's values (attempts only see the
sum; the split shows only in the recognition term), so the agents' differences per subject become
explicit ``skills`` of the team's AgentModels (shrunk toward the team's mean by empirical Bayes,
:class:`Shrinkage`: each agent's main effect and the agent-by-subject rest by their own factors
1 - mean SE^2 / mean value^2, also in the recognition term of the updates; the report's ``skill_dev``
rows are unshrunk). Weak N(0, :data:`PRIOR_SD`^2) priors on the subject levels and skill
deviations keep cells with all-right attempts finite. P(trap | wrong) = min(1, trap_base + trap_slope d):
trap_base, trap_slope, with each task's trap a latent answer (:func:`topo_env.fitting.fit_latents.fit_latent_trap`).
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from topo_env.fitting.fit_data import MIN_CALLS, Call, Data
from topo_env.fitting.fit_latents import fit_latent_trap
from topo_env.fitting.fit_report import Report
from topo_env.fitting.fit_stats import gauss_hermite, hessian, log_sig, lse, sig, softmax, std_errors
from topo_env.sim.profiles import SimProfile

MIN_REPEATS = 50  # (episode, agent) pairs with two attempts needed to fit blind_spread
MIN_CELL_ATTEMPTS = 20  # attempts of an (agent, subject) needed to fit the agent's skill there
PRIOR_SD = 2.0
N_Z, N_U = 16, 6  # Gauss-Hermite nodes: task latent, blind spot


class Shrinkage(NamedTuple):
    """Empirical-Bayes shrinkage of the agents' skill deviations (:meth:`AttemptModel.shrinkage`): ``agent``
    for each agent's main effect (its mean deviation over the subjects, weighted by ``weights`` (S,), zero
    on subjects without fitted deviations) and ``interaction`` for the rest of each (agent, subject) cell."""

    agent: float
    interaction: float
    weights: np.ndarray

    def apply(self, dev: np.ndarray) -> np.ndarray:
        """(N, S) deviations shrunk on the weighted subjects: agent * main effect + interaction * rest."""
        cols = self.weights > 0
        out = dev.copy()
        main = dev[:, cols] @ self.weights[cols]
        out[:, cols] = self.agent * main[:, None] + self.interaction * (dev[:, cols] - main[:, None])
        return out


def padded_skills(base: SimProfile, data: Data) -> np.ndarray:
    """(N, S) the base team's skills k_is, zero on the subjects the base does not know."""
    skills = np.array(base.skills(data.n_agents))
    return np.pad(skills, ((0, 0), (0, len(data.subjects) - skills.shape[1])))


def fit_ability(data: Data, base: SimProfile, attempts: list[Call],
                report: Report) -> tuple[AttemptModel | None, np.ndarray, Shrinkage | None]:
    """Fit the attempt model and the trap to ``attempts``, report their rows; returns (the model or None,
    the skill matrix k_is, the deviations' shrinkage)."""
    if len(attempts) < MIN_CALLS:
        for name in ("alpha", "beta", "task_spread", "blind_spread", "debug_gain", "trap_base", "trap_slope"):
            report.keep(name, len(attempts), "too few attempts")
        return None, padded_skills(base, data), None
    am = AttemptModel(data, base, attempts)
    am.maximize_likelihood()
    report_attempts(am, data, base, report)
    shrink = am.shrinkage()
    if am.fit_dev:
        report.notes.append(f"the agents' fitted skill deviations are shrunk toward the team's mean in the written "
                            f"profile and in the update fit's recognition term (empirical Bayes, 1 - mean SE^2 / mean "
                            f"value^2: each agent's mean deviation by {shrink.agent:.2f}, the agent-by-subject rest "
                            f"by {shrink.interaction:.2f}); the skill_dev rows are the unshrunk estimates")
    if data.d_estimated.any():
        data.set_difficulty_posterior(*am.task_difficulty())
    fit_latent_trap(data, attempts, base, report)
    return am, am.skill_matrix(shrink), shrink


class AttemptModel:
    """Marginal likelihood of the observed attempts (task latent and blind spots integrated out)."""

    def __init__(self, data: Data, base: SimProfile, calls: list[Call]):
        self.data, self.base = data, base
        self._base_gauge()
        self.calls = sorted(calls, key=lambda c: (c.task, c.ep, c.agent))
        cs = self.calls
        self.y = np.array([c.label == 0 for c in cs], dtype=float)
        self.sign = 2.0 * self.y - 1.0
        self.subject = np.array([data.subject_of[c.task] for c in cs])
        self.agent = np.array([c.agent for c in cs])
        self.failed = np.array([c.failed for c in cs], dtype=float)
        self.role_off = np.array([base.roles.get(c.role, (0.0, 1.0, 1.0))[0] for c in cs])
        self._group()
        self._choose_free()
        self.X = self._design()
        self.offset = self._offset()
        self.zx, self.lwz = gauss_hermite(N_Z)
        self.ux, self.lwu = gauss_hermite(N_U)
        self._task_nodes()
        self.k_lin = self.X.shape[1]
        self.prior = np.zeros(len(self.names))
        self.prior[:len(self.fit_sub) + len(self.fit_dev)] = 1.0 / PRIOR_SD ** 2

    def _base_gauge(self) -> None:
        """The base's pieces the fit keeps: team-average skill ``kbar`` and deviations ``base_dev`` per
        subject, subject offsets ``b_base`` (zero on subjects the base does not know)."""
        base, n_sub = self.base, len(self.data.subjects)
        base_skills = np.array(base.skills(self.data.n_agents))  # (N, S_base)
        kbar = np.zeros(n_sub)
        kbar[:base_skills.shape[1]] = base_skills.mean(axis=0)
        dev = np.zeros((self.data.n_agents, n_sub))
        dev[:, :base_skills.shape[1]] = base_skills - base_skills.mean(axis=0)
        self.kbar, self.base_dev = kbar, dev
        b_base = np.zeros(n_sub)
        b_base[:len(base.subjects)] = base.subject_offsets
        self.b_base = b_base

    def _group(self) -> None:
        """Groups (task, episode, agent) of the sorted calls, nested in tasks: their starts and indices,
        how many groups repeat an attempt and how many tasks have two or more attempts."""
        cs = self.calls
        gkey = [(c.task, c.ep, c.agent) for c in cs]
        starts = [0] + [k for k in range(1, len(cs)) if gkey[k] != gkey[k - 1]]
        self.g_start = np.array(starts)
        self.g_of = np.repeat(np.arange(len(starts)), np.diff(starts + [len(cs)]))
        g_task = [cs[s].task for s in starts]
        t_starts = [0] + [g for g in range(1, len(starts)) if g_task[g] != g_task[g - 1]]
        self.t_start = np.array(t_starts)
        self.t_of_g = np.repeat(np.arange(len(t_starts)), np.diff(t_starts + [len(starts)]))
        self.task_ids = np.array([g_task[s] for s in t_starts])
        sizes = np.diff(starts + [len(cs)])
        self.repeats = int((sizes >= 2).sum())
        tasks_n = np.bincount(self.t_of_g[self.g_of], minlength=len(t_starts))
        self.multi_tasks = int((tasks_n >= 2).sum())

    def nodes_of(self, j: int) -> tuple[np.ndarray, np.ndarray]:
        """Task ``j``'s quadrature nodes over (d, z): (Q,) difficulty and (Q,) log prior weight (its tokens'
        evidence on d included, :mod:`topo_env.fitting.fit_latents`); a task with a known d has it at every node."""
        data, g = self.data, len(self.d_grid)
        if not data.d_estimated[j]:
            return np.full(g * N_Z, data.difficulty[j]), np.tile(self.lwz, g) - np.log(g)
        lw_d = data.d_evidence[j] - lse(data.d_evidence[j], axis=0)
        return np.repeat(self.d_grid, N_Z), np.repeat(lw_d, N_Z) + np.tile(self.lwz, g)

    def _task_nodes(self) -> None:
        """Per task row: the (d, z) nodes (``node_d``, ``node_lw``: (T, Q)), ``node_z`` (Q,), and per call its
        task's difficulty nodes ``Dk`` (n, Q). Without a latent difficulty one d node (Q = N_Z)."""
        self.d_grid = self.data.d_nodes if self.data.d_estimated.any() else np.array([0.5])
        nodes = [self.nodes_of(int(j)) for j in self.task_ids]
        self.node_d = np.array([d for d, _ in nodes])
        self.node_lw = np.array([lw for _, lw in nodes])
        self.node_z = np.tile(self.zx, len(self.d_grid))
        row_of_call = self.t_of_g[self.g_of]
        self.Dk = self.node_d[row_of_call] - 0.5

    def _choose_free(self) -> None:
        """Which subject levels, agent deviations, blind_spread and debug_gain the attempts identify."""
        data = self.data
        n_sub = len(data.subjects)
        counts = np.zeros((data.n_agents, n_sub))
        np.add.at(counts, (self.agent, self.subject), 1)
        self.counts = counts
        self.fit_sub = [s for s in range(n_sub) if counts[:, s].sum() >= MIN_CELL_ATTEMPTS]
        self.fit_dev = [(i, s) for s in self.fit_sub for i in range(data.n_agents - 1)
                        if (counts[:, s] >= MIN_CELL_ATTEMPTS).all()] if data.n_agents > 1 else []
        self.dev_subjects = sorted({s for _, s in self.fit_dev})
        self.fit_blind = self.repeats >= MIN_REPEATS
        self.fit_debug = self.failed.sum() >= MIN_CALLS
        self.names = ([f"level[{data.subjects[s]}]" for s in self.fit_sub]
                      + [f"skill_dev[{i},{data.subjects[s]}]" for i, s in self.fit_dev] + ["beta", "task_spread"]
                      + (["blind_spread"] if self.fit_blind else []) + (["debug_gain"] if self.fit_debug else []))

    def _design(self) -> np.ndarray:
        """The design matrix of the linear part of eta: subject levels, deviations (the last agent's is
        minus the others' sum), -(d - 1/2), and [failed] when debug_gain is fitted."""
        k_sub, k_dev = len(self.fit_sub), len(self.fit_dev)
        X = np.zeros((len(self.calls), k_sub + k_dev + 1 + (1 if self.fit_debug else 0)))
        sub_col = {s: k for k, s in enumerate(self.fit_sub)}
        for k, s in enumerate(self.subject):
            if s in sub_col:
                X[k, sub_col[s]] = 1.0
        last = self.data.n_agents - 1
        for k, (i, s) in enumerate(self.fit_dev):
            X[(self.agent == i) & (self.subject == s), k_sub + k] = 1.0
            X[(self.agent == last) & (self.subject == s), k_sub + k] = -1.0
        # column k_sub + k_dev is beta's: its -(d - 1/2) varies over the quadrature nodes (``Dk``), not here
        if self.fit_debug:
            X[:, -1] = self.failed
        return X

    def _offset(self) -> np.ndarray:
        """The fixed part of eta: role, the base's gauge pieces for subjects and deviations not fitted."""
        base, last = self.base, self.data.n_agents - 1
        off = self.role_off + self.kbar[self.subject]
        not_fit_sub = ~np.isin(self.subject, self.fit_sub)
        off[not_fit_sub] += base.alpha + self.b_base[self.subject[not_fit_sub]]
        dev_fixed = np.array([(a, s) not in set(self.fit_dev) and not (a == last and s in self.dev_subjects)
                              for a, s in zip(self.agent, self.subject)])
        off[dev_fixed] += self.base_dev[self.agent[dev_fixed], self.subject[dev_fixed]]
        if not self.fit_debug:
            off += base.debug_gain * self.failed
        return off

    def _unpack(self, theta):
        k = self.k_lin
        coef = np.concatenate([theta[:k - (1 if self.fit_debug else 0)], theta[-1:] if self.fit_debug else []])
        ts = theta[k - (1 if self.fit_debug else 0)]
        bs = theta[k + 1 - (1 if self.fit_debug else 0)] if self.fit_blind else self.base.blind_spread
        return coef, ts, bs

    def _prior_mean(self, theta):
        mean = np.zeros_like(theta)
        k_sub = len(self.fit_sub)
        mean[:k_sub] = self.base.alpha + self.b_base[self.fit_sub]
        return mean

    def _beta_col(self) -> int:
        return len(self.fit_sub) + len(self.fit_dev)

    def _log_terms(self, theta):
        """Per call, node and blind-spot node the linear predictor ``e`` (n, Q, Qu); per group ``LG`` (G, Q, Qu)
        and ``lg`` (G, Q); per task row ``LT`` (T, Q) and ``ll_t`` (T,), the task's log marginal likelihood."""
        coef, ts, bs = self._unpack(theta)
        eta0 = self.X @ coef + self.offset
        beta = coef[self._beta_col()]
        e = (eta0[:, None, None] - beta * self.Dk[:, :, None] + ts * self.node_z[None, :, None]
             + bs * self.ux[None, None, :])
        lp = log_sig(self.sign[:, None, None] * e)
        LG = np.add.reduceat(lp, self.g_start, axis=0)  # (G, Q, Qu)
        lg = lse(LG + self.lwu[None, None, :], axis=2)  # (G, Q)
        LT = np.add.reduceat(lg, self.t_start, axis=0)  # (T, Q)
        ll_t = lse(LT + self.node_lw, axis=1)
        return e, LG, lg, LT, ll_t

    def task_difficulty(self) -> tuple[np.ndarray, np.ndarray]:
        """(task indices, log posterior over ``d_grid``) of the fitted tasks with a latent difficulty."""
        _, _, _, LT, _ = self._log_terms(self.theta)
        post = (LT + self.node_lw).reshape(len(self.task_ids), len(self.d_grid), N_Z)
        rows = np.flatnonzero(self.data.d_estimated[self.task_ids])
        return self.task_ids[rows], lse(post[rows], axis=2)

    def nll(self, theta, grad=True):
        coef, ts, bs = self._unpack(theta)
        e, LG, lg, LT, ll_t = self._log_terms(theta)
        y = self.y[:, None, None]
        pm = self._prior_mean(theta)
        f = -ll_t.sum() + 0.5 * np.sum(self.prior * (theta - pm) ** 2)
        if not grad:
            return f
        piz = np.exp(LT + self.node_lw - ll_t[:, None])  # (T, Q)
        piu = np.exp(LG + self.lwu[None, None, :] - lg[:, :, None])  # (G, Q, Qu)
        W = piz[self.t_of_g][self.g_of][:, :, None] * piu[self.g_of]
        r = W * (y - sig(e))
        g_eta = r.sum(axis=(1, 2))
        g_lin = self.X.T @ g_eta
        g_lin[self._beta_col()] = -np.einsum("kqm,kq->", r, self.Dk)
        g_ts = np.einsum("kqm,q->", r, self.node_z)
        g_bs = np.einsum("kqm,m->", r, self.ux)
        k = self.k_lin
        if self.fit_debug:
            g = np.concatenate([g_lin[:k - 1], [g_ts], [g_bs] if self.fit_blind else [], g_lin[k - 1:]])
        else:
            g = np.concatenate([g_lin, [g_ts], [g_bs] if self.fit_blind else []])
        return f, -g + self.prior * (theta - pm)

    def maximize_likelihood(self):
        """Maximize the marginal likelihood (L-BFGS-B from the base's values); sets ``theta``, ``bounds``
        and, from the numerical Hessian, ``se`` and ``cov``. Returns scipy's result."""
        from scipy.optimize import minimize

        k_sub = len(self.fit_sub)
        x0 = np.concatenate([self.base.alpha + self.b_base[self.fit_sub], np.zeros(len(self.fit_dev)),
                             [self.base.beta, max(self.base.task_spread, 0.3)],
                             [max(self.base.blind_spread, 0.3)] if self.fit_blind else [],
                             [self.base.debug_gain] if self.fit_debug else []])
        self.bounds = bounds = [(-15, 15)] * (k_sub + len(self.fit_dev)) + [(-30, 30), (1e-3, 8)] + (
            [(1e-3, 8)] if self.fit_blind else []) + ([(-5, 5)] if self.fit_debug else [])
        res = minimize(lambda t: self.nll(t), x0, jac=True, method="L-BFGS-B", bounds=bounds,
                       options={"maxiter": 500})
        self.theta = res.x
        subject_of_parameter = [*self.fit_sub, *(s for _, s in self.fit_dev)]  # beta and the rest: shared (-1)
        blocks = np.array(subject_of_parameter + [-1] * (len(res.x) - len(subject_of_parameter)))
        h = hessian(lambda t: self.nll(t), res.x, step=1e-5, blocks=blocks)  # each task has one subject
        self.se, self.cov = std_errors(h)
        return res

    def predictive(self, calls: list[Call]) -> np.ndarray:
        """P(attempt right) of ``calls`` given the attempts of their task (posterior of the latents)."""
        coef, ts, bs = self._unpack(self.theta)
        _, _, _, LT, _ = self._log_terms(self.theta)
        post = softmax(LT + self.node_lw, axis=1)
        row_of_task = {int(t): r for r, t in enumerate(self.task_ids)}
        out = np.empty(len(calls))
        levels, skills = self.levels(), self.skill_matrix()
        for k, c in enumerate(calls):
            s = self.data.subject_of[c.task]
            eta = (levels[s] + skills[c.agent, s] + self.base.roles.get(c.role, (0.0, 1.0, 1.0))[0]
                   + (self.debug_gain() if c.failed else 0.0))
            if c.task in row_of_task:
                d, w = self.node_d[row_of_task[c.task]], post[row_of_task[c.task]]
            else:
                d, lw = self.nodes_of(c.task)
                w = softmax(lw)
            e = eta - self.beta() * (d - 0.5) + ts * self.node_z
            p = sig(e[:, None] + bs * self.ux[None, :]) @ np.exp(self.lwu)
            out[k] = float(w @ p)
        return out

    # fitted quantities in the model's terms
    def levels(self) -> np.ndarray:
        """alpha + b_s per subject (base for subjects without attempts)."""
        lev = self.base.alpha + self.b_base.copy()
        lev[self.fit_sub] = self.theta[:len(self.fit_sub)]
        return lev

    def deviation_map(self) -> np.ndarray:
        """(N * S, k_dev) the linear map from the fitted deviations to the (N, S) deviation matrix (row-major;
        the last agent's is minus the others' sum, zero on subjects without fitted deviations)."""
        n, n_sub = self.data.n_agents, len(self.data.subjects)
        A = np.zeros((n * n_sub, len(self.fit_dev)))
        for k, (i, s) in enumerate(self.fit_dev):
            A[i * n_sub + s, k] = 1.0
            A[(n - 1) * n_sub + s, k] = -1.0
        return A

    def skill_matrix(self, shrink: Shrinkage | None = None) -> np.ndarray:
        """k_is: the base's team-average skill per subject plus the fitted deviations (shrunk by ``shrink``)."""
        dev = self.base_dev.copy()
        dev[:, self.dev_subjects] = 0.0
        k_sub = len(self.fit_sub)
        fitted = (self.deviation_map() @ self.theta[k_sub:k_sub + len(self.fit_dev)]).reshape(dev.shape)
        dev[:, self.dev_subjects] = fitted[:, self.dev_subjects]
        if shrink is not None:
            dev = shrink.apply(dev)
        return self.kbar[None, :] + dev

    def shrinkage(self) -> Shrinkage:
        """Empirical-Bayes factors for the fitted skill deviations, one for each agent's main effect (its
        attempt-weighted mean deviation over the subjects) and one for the agent-by-subject rest:
        1 - mean(SE^2) / mean(value^2), in [0, 1] (the share of their spread that is not estimation noise).
        An agent's main effect rests on all its attempts and survives; a cell's rest on a few dozen and
        mostly goes. Shrunk deviations predict an agent's attempts on new tasks better, and inside the
        recognition term max(0, . + skill) unshrunk noise would raise the recognition on average."""
        weights = np.zeros(len(self.data.subjects))
        weights[self.dev_subjects] = self.counts[:, self.dev_subjects].sum(axis=0)
        if not self.fit_dev or not weights.sum():
            return Shrinkage(1.0, 1.0, weights)
        weights = weights / weights.sum()
        n, n_sub = self.data.n_agents, len(self.data.subjects)
        k_sub, k_dev = len(self.fit_sub), len(self.fit_dev)
        A = self.deviation_map()
        main = np.kron(np.eye(n), weights[None, :])  # (N, N * S): each agent's weighted mean
        cols = np.zeros(n_sub, dtype=bool)
        cols[self.dev_subjects] = True
        rest = (np.eye(n * n_sub) - np.kron(np.eye(n), np.outer(np.ones(n_sub), weights)))[np.tile(cols, n)]
        cov = self.cov[k_sub:k_sub + k_dev, k_sub:k_sub + k_dev]
        t = self.theta[k_sub:k_sub + k_dev]
        if not np.isfinite(cov).all():
            return Shrinkage(1.0, 1.0, weights)

        def factor(M: np.ndarray) -> float:
            value, var = M @ A @ t, np.diag(M @ A @ cov @ A.T @ M.T)
            return float(np.clip(1.0 - var.mean() / (value ** 2).mean(), 0.0, 1.0)) if (value ** 2).mean() > 0 else 1.0

        return Shrinkage(factor(main), factor(rest), weights)

    def beta(self) -> float:
        return float(self.theta[len(self.fit_sub) + len(self.fit_dev)])

    def debug_gain(self) -> float:
        return float(self.theta[-1]) if self.fit_debug else self.base.debug_gain


def report_attempts(am: AttemptModel, data: Data, base: SimProfile, report: Report) -> None:
    """Report the attempt model's parameters, which are a linear map J of its own (the subject levels
    keep the base's weighted mean offset: alpha takes the rest), with the covariance J cov J^T."""
    k_sub, k_dev = len(am.fit_sub), len(am.fit_dev)
    n, k = len(am.calls), len(am.theta)
    names, rows, shift, calls, what, bounds, base_values = [], [], [], [], [], [], []

    def add(name, row, c, n_calls, informed, bound=None, base_value=None):
        names.append(name), rows.append(row), shift.append(c), calls.append(n_calls), what.append(informed)
        bounds.append(bound), base_values.append(base_value)

    unit = np.eye(k)
    if k_sub:  # alpha: the part of the levels left after the base's weighted mean offset
        w = np.array([base.subjects[s][1] if s < len(base.subjects) else 0.0 for s in am.fit_sub], dtype=float)
        w = np.ones(k_sub) if w.sum() == 0 else w
        w = w / w.sum()
        a_row = np.zeros(k)
        a_row[:k_sub] = w
        a_shift = -float(w @ am.b_base[am.fit_sub])
        add("alpha", a_row, a_shift, n, "attempts (subject offsets keep the base's weighted mean)")
        for j, s in enumerate(am.fit_sub):
            add(f"subject_offset[{data.subjects[s]}]", unit[j] - a_row, -a_shift, int(am.counts[:, s].sum()),
                "attempts of the subject", None, am.b_base[s])  # the priors keep the levels off their bounds
    else:
        report.keep("alpha", n, "no subject with enough attempts")
    for j, (i, s) in enumerate(am.fit_dev):
        add(f"skill_dev[{i},{data.subjects[s]}]", unit[k_sub + j], 0.0, int(am.counts[i, s]),
            "agent's attempts minus the team's, per subject", am.bounds[k_sub + j], am.base_dev[i, s])
    at = k_sub + k_dev
    add("beta", unit[at], 0.0, n, "attempts vs difficulty", am.bounds[at])
    add("task_spread", unit[at + 1], 0.0, n, f"attempts sharing a task ({am.multi_tasks} tasks with two or more)",
        am.bounds[at + 1])
    if am.fit_blind:
        add("blind_spread", unit[at + 2], 0.0, am.repeats, "one agent's repeated attempts in an episode",
            am.bounds[at + 2])
    else:
        report.keep("blind_spread", am.repeats, f"fewer than {MIN_REPEATS} repeated attempts by one agent in an episode")
    if am.fit_debug:
        add("debug_gain", unit[-1], 0.0, int(am.failed.sum()), "re-solves after a failed verification", am.bounds[-1])
    else:
        report.keep("debug_gain", int(am.failed.sum()), "too few re-solves after a failed verification")
    J = np.array(rows)
    values = J @ am.theta + np.array(shift)
    cov = J @ am.cov @ J.T
    se = np.sqrt(np.clip(np.diag(cov), 0.0, None))
    for j, name in enumerate(names):
        report.set(name, values[j], se[j], calls[j], what[j], base=base_values[j], bounds=bounds[j])
    report.block(names, cov)
