"""The update calls' likelihood (:class:`UpdateModel`) and the search for its maximum (:func:`fit_updates`).

An update call is shown messages; the agent answers the best of the labels on the table with scores
S(a) / tau (:mod:`topo_env.sim.model`, step 3). Recognition of a shown right answer and the pull of a
shown trap enter per subject s as R_s = max(0, rho + rho_v v_s) and P_s = max(0, theta - theta_v v_s).

The likelihood in (rho, rho_v, theta, theta_v, v) is not concave: max(0, .) has plateaus where a whole
block of parameters stops mattering, and the per-subject v are only meaningful together with the
globals. Started from a base profile whose v order the subjects differently from the team's, a local
search can end on such a plateau (every recognition and pull switched off, the v on their bounds).
:func:`fit_updates` therefore searches globally:

1. **Free stage**: every fitted subject gets its own R_s >= 0 and P_s >= 0 (with the shared w_fresh,
   w_peer, tau). Per subject the scores are linear in R_s and P_s, so this fit has no plateaus to
   get lost on; its maximum is the saturated model's, and the line through the points (R_s, P_s) gives
   a start for the structural model (the position along it is v_s).
2. **Structural starts**: that start, the base profile's values and :data:`RANDOM_STARTS` seeded
   random globals with each v_s chosen on a grid given them (:data:`V_GRID`); each is
   polished by L-BFGS-B with the analytic gradient, alternating with a grid step that moves any v_s
   whose own likelihood is better elsewhere, until neither improves.
3. The best start is reported, with how many starts reached it (within :data:`AGREE` nats), the
   worst start, and a likelihood-ratio test of the structural model against the free stage
   (df = S - 2): a small p-value says the team's recognition and pull do not follow
   max(0, rho + rho_v v) and max(0, theta - theta_v v) across subjects.

Gauge: (rho, rho_v, theta, theta_v) and an affine map of the fitted v give the same likelihood. The
fit reports the v with the base's weighted mean and weighted standard deviation over the fitted
subjects (weights: the base's subject frequencies), and the sign for which rho_v + theta_v >= 0
(more verifiable: recognised more, or persuaded less). :func:`to_gauge` maps any profile's values to
that gauge (the truth of a simulation study, say). Standard errors come from the information of the
globals and the v (outer product of the per-task scores) in the directions keeping the gauge; a
direction in which the likelihood is flat leaves its parameters "not identified" (no standard error).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from topo_env.fitting.fit_stats import at_bound, gauss_hermite, lse, sig, std_errors

if TYPE_CHECKING:
    from topo_env.sim.profiles import SimProfile

UPDATE_PARAMS = ("w_fresh", "w_peer", "rho", "rho_v", "theta", "theta_v", "tau")
BOUNDS = ((0.0, 20.0), (0.0, 20.0), (-10.0, 10.0), (-10.0, 10.0), (-10.0, 10.0), (-10.0, 10.0), (1e-3, 20.0))
FREE_BOUND = (0.0, 20.0)  # R_s and P_s of the free stage
V_SPAN = 0.8  # during the search the fitted v span [-V_SPAN, V_SPAN]; the box [-1, 1] leaves room to move
V_GRID = np.linspace(-1.0, 1.0, 21)
RANDOM_STARTS = 2
AGREE = 0.05  # nats: starts ending this close to the best reached it
MIN_V_SUBJECTS = 3  # fewer fitted subjects leave the v with no degrees of freedom beyond the gauge
N_C = 6  # Gauss-Hermite nodes for a fresh attempt's unobserved confidence
POLISH_ROUNDS = 4


@dataclass
class Gauge:
    """The gauge the fitted v are reported in: weighted mean and SD of the base's v over the fitted
    subjects (weights: the base's frequencies), sign: rho_v + theta_v >= 0."""

    weights: np.ndarray  # normalised, one per fitted subject
    mean: float
    sd: float

    @classmethod
    def of(cls, weights: np.ndarray, v_base: np.ndarray) -> "Gauge":
        w = np.asarray(weights, dtype=float)
        w = w / w.sum()
        m = float(w @ v_base)
        return cls(w, m, float(np.sqrt(w @ (v_base - m) ** 2)))


def to_gauge(t: np.ndarray, v: np.ndarray, gauge: Gauge) -> tuple[np.ndarray, np.ndarray, bool]:
    """(t, v) mapped by the affine map of v that gives ``v`` the gauge's weighted mean and SD and
    rho_v + theta_v >= 0, with (rho, rho_v, theta, theta_v) changed so that every R_s and P_s stay
    the same. ``t``: the 7 update parameters (:data:`UPDATE_PARAMS`); ``v``: the fitted subjects'
    verifiabilities. Returns (t, v, mapped); not mapped (returned as given) when the v do not vary."""
    w = gauge.weights
    m = float(w @ v)
    sd = float(np.sqrt(w @ (v - m) ** 2))
    if sd < 1e-9 or gauge.sd < 1e-9:
        return t, v, False
    a = gauge.sd / sd
    if (t[3] + t[5]) / a < 0:
        a = -a
    return (*_affine(t, v, a, gauge.mean - a * m), True)


def _in_box(t: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The same model with the v spanning [-V_SPAN, V_SPAN]."""
    lo, hi = float(v.min()), float(v.max())
    if hi - lo < 1e-9:
        return t, v
    a = 2 * V_SPAN / (hi - lo)
    return _affine(t, v, a, -V_SPAN - a * lo)


def _affine(t: np.ndarray, v: np.ndarray, a: float, b: float) -> tuple[np.ndarray, np.ndarray]:
    """(t, a v + b) with rho, rho_v, theta, theta_v changed so that every rho + rho_v v and
    theta - theta_v v stay the same."""
    t = t.copy()
    t[3], t[5] = t[3] / a, t[5] / a
    t[2], t[4] = t[2] - t[3] * b, t[4] + t[5] * b
    return t, a * v + b


class UpdateModel:
    """Softmax likelihood of the update calls (committed own answer exact, fresh one integrated out),
    with its gradient. ``calls``: update calls (they were shown messages), ``p_right``: each call's
    P(own attempt right) given its task's attempts, ``skills``: (N, S) k_is, ``mu``: (mu_correct,
    mu_wrong, sigma_conf) for a fresh attempt's unobserved confidence."""

    def __init__(self, data, base: SimProfile, calls: list, p_right: np.ndarray, skills: np.ndarray,
                 mu: tuple[float, float, float]):
        self.base = base
        self.calls = calls
        n = len(calls)
        L = max(len({m.label for m in c.msgs} | ({c.prev.label} if c.committed else set())) for c in calls) + 1
        self.L = L
        self.peer = np.zeros((n, L))
        self.own = np.zeros((n, L))
        self.valid = np.zeros((n, L), dtype=bool)
        self.rec_slot = np.zeros((n, L))
        self.pull_slot = np.zeros((n, L))
        self.ans = np.zeros(n, dtype=int)
        self.fresh = np.zeros(n, dtype=bool)
        self.n_subjects = len(data.subjects)
        self.subject = np.array([data.subject_of[c.task] for c in calls])
        self.d = np.array([data.difficulty[c.task] for c in calls])
        rec_fac = np.array([base.roles.get(c.role, (0.0, 1.0, 1.0))[1] for c in calls])
        self.rec_lin = (1.0 - base.rho_d * self.d) * rec_fac  # rec = max(0, R_s rec_lin + skill)
        self.skill = np.array([skills[c.agent, data.subject_of[c.task]] for c in calls])
        rows_call, rows_slot, rows_prior, rows_mu = [], [], [], []
        zipf = np.array([k ** -base.wrong_zipf for k in range(1, max(base.n_wrong, 2))])
        zipf = zipf / zipf.sum()

        def p_att(label: int, p: float, q: float) -> float:
            if label == 0:
                return p
            if label == 1:
                return (1 - p) * q
            return (1 - p) * (1 - q) * (zipf[label - 2] if label - 2 < len(zipf) else 1e-6)

        def vf(m) -> float:
            return base.verdict_pass_weight if m.verdict == 1 else (base.verdict_fail_weight if m.verdict == -1 else 1.0)

        for k, c in enumerate(calls):
            q = min(1.0, base.trap_base + base.trap_slope * self.d[k])
            shown = sorted({m.label for m in c.msgs})
            labels = sorted(set(shown) | ({c.prev.label} if c.committed else set()))
            slot = {a: s for s, a in enumerate(labels)}
            self.valid[k, :len(labels)] = True
            for m in c.msgs:
                self.peer[k, slot[m.label]] += m.conf * vf(m)
            if 0 in shown:
                self.rec_slot[k, slot[0]] = 1.0
            if 1 in shown:
                self.pull_slot[k, slot[1]] = 1.0
            if c.committed:
                self.own[k, slot[c.prev.label]] = base.w_commit * c.prev.conf * vf(c.prev)
                self.ans[k] = slot[c.label]
                continue
            self.fresh[k] = True
            new = L - 1
            if c.label in slot:
                self.ans[k] = slot[c.label]
                total = 0.0
                for a in shown:
                    pr = p_att(a, p_right[k], q)
                    total += pr
                    rows_call.append(k), rows_slot.append(slot[a]), rows_prior.append(pr), rows_mu.append(a == 0)
                pr0 = p_right[k] if 0 not in slot else 0.0
                if pr0 > 0:
                    rows_call.append(k), rows_slot.append(new), rows_prior.append(pr0), rows_mu.append(True)
                rest = max(0.0, 1.0 - total - pr0)
                if rest > 0:
                    rows_call.append(k), rows_slot.append(new), rows_prior.append(rest), rows_mu.append(False)
            else:  # the answer is none of the shown ones: it is the agent's own attempt
                self.ans[k] = new
                rows_call.append(k), rows_slot.append(new), rows_prior.append(max(p_att(c.label, p_right[k], q), 1e-12))
                rows_mu.append(c.label == 0)
        self.r_call = np.array(rows_call, dtype=int)  # rows are in call order
        has_rows = len(rows_call) > 0
        self.r_starts = np.flatnonzero(np.r_[True, self.r_call[1:] != self.r_call[:-1]]) if has_rows else None
        self.r_group = np.cumsum(np.r_[True, self.r_call[1:] != self.r_call[:-1]]) - 1 if has_rows else None
        self.r_slot = np.array(rows_slot, dtype=int)
        self.r_logprior = np.log(np.clip(np.array(rows_prior), 1e-300, None))
        mu_c, mu_w, sd = mu
        x, lw = gauss_hermite(N_C)
        mus = np.where(np.array(rows_mu, dtype=bool), mu_c, mu_w)
        self.r_c = sig(mus[:, None] + sd * x[None, :]) if has_rows else np.zeros((0, N_C))
        self.lw_c = lw
        self.comm_idx = np.flatnonzero(~self.fresh)
        self.n_fresh, self.n_committed = int(self.fresh.sum()), int((~self.fresh).sum())
        self.task = np.array([c.task for c in calls])
        self.counts = np.bincount(self.subject, minlength=self.n_subjects)

    # -- the likelihood in per-call recognition and pull -------------------------------------------
    def loglik(self, w_fresh: float, w_peer: float, tau: float, rec: np.ndarray, pull: np.ndarray,
               grad: bool = False):
        """Per-call log-likelihood given each call's recognition bonus ``rec`` and trap pull ``pull``.
        With ``grad``: also a (5, n) array of its derivatives per call in rec, pull, w_fresh, w_peer, tau."""
        n = len(self.calls)
        S = self.own + w_peer * self.peer + self.rec_slot * rec[:, None] + self.pull_slot * pull[:, None]
        S[~self.valid] = -np.inf
        out = np.zeros(n)
        g = np.zeros((5, n)) if grad else None  # rows: rec, pull, w_fresh, w_peer, tau
        C = self.comm_idx
        if len(C):
            Sc = S[C]
            lz, p = _log_softmax_parts(Sc / tau, axis=1)
            ar = np.arange(len(C))
            ans = self.ans[C]
            s_ans = Sc[ar, ans]
            out[C] = s_ans / tau - lz
            if grad:
                G = -p
                G[ar, ans] += 1.0
                G /= tau
                g[0, C] = (G * self.rec_slot[C]).sum(1)
                g[1, C] = (G * self.pull_slot[C]).sum(1)
                g[3, C] = (G * self.peer[C]).sum(1)
                g[4, C] = -(s_ans - (p * np.where(self.valid[C], Sc, 0.0)).sum(1)) / tau ** 2
        if len(self.r_call):
            rr = np.arange(len(self.r_call))
            calls, col = self.r_call, self.r_slot
            Sr = np.repeat(S[calls][:, None, :], self.r_c.shape[1], axis=1)  # (R, Qc, L)
            base_col = np.where((col == self.L - 1)[:, None], 0.0, Sr[rr, :, col])
            Sr[rr, :, col] = base_col + w_fresh * self.r_c
            lz, p = _log_softmax_parts(Sr / tau, axis=2)  # (R, Qc), (R, Qc, L)
            ans = self.ans[calls]
            s_ans = Sr[rr, :, ans]
            lp = s_ans / tau - lz
            lrow = lse(lp + self.lw_c[None, :], axis=1) + self.r_logprior
            m = np.maximum.reduceat(lrow, self.r_starts)
            m = np.where(np.isfinite(m), m, 0.0)
            ll_call = np.log(np.add.reduceat(np.exp(lrow - m[self.r_group]), self.r_starts)) + m
            out[calls[self.r_starts]] = ll_call
            if grad:
                pi = np.exp(lp + self.lw_c[None, :] + self.r_logprior[:, None] - ll_call[self.r_group][:, None])
                G = -p
                G[rr, :, ans] += 1.0
                W = G * (pi / tau)[..., None]
                Wsum = W.sum(axis=1)  # (R, L)
                Sr[np.isinf(Sr)] = 0.0
                rows = np.stack([(Wsum * self.rec_slot[calls]).sum(1), (Wsum * self.pull_slot[calls]).sum(1),
                                 (W[rr, :, col] * self.r_c).sum(1), (Wsum * self.peer[calls]).sum(1),
                                 (pi * -(s_ans - (p * Sr).sum(2))).sum(1) / tau ** 2])
                for j in range(5):
                    g[j] += np.bincount(calls, weights=rows[j], minlength=n)
        return (out, g) if grad else out

    # -- per-subject recognition and pull -----------------------------------------------------------
    def _rec_pull(self, R: np.ndarray, P: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        inner = R[self.subject] * self.rec_lin + self.skill
        return np.maximum(0.0, inner), P[self.subject] * self.d, inner > 0

    def subject_terms(self, w: np.ndarray, R: np.ndarray, P: np.ndarray, grad: bool = False):
        """Per-subject log-likelihood with per-subject R and P (arrays over all subjects) and
        w = (w_fresh, w_peer, tau); with ``grad`` also its (S, 3) gradient in w and (S,) in R and P."""
        rec, pull, active = self._rec_pull(R, P)
        S = self.n_subjects
        if not grad:
            return np.bincount(self.subject, weights=self.loglik(w[0], w[1], w[2], rec, pull), minlength=S)
        ll, g = self.loglik(w[0], w[1], w[2], rec, pull, grad=True)
        by = lambda x: np.bincount(self.subject, weights=x, minlength=S)  # noqa: E731
        gw = np.stack([by(g[2]), by(g[3]), by(g[4])], axis=1)
        return by(ll), gw, by(g[0] * active * self.rec_lin), by(g[1] * self.d)

    def call_scores(self, t: np.ndarray, v: np.ndarray) -> np.ndarray:
        """Each call's gradient of its log-likelihood: an (n, 8) array, in ``t`` (7 columns) and in its own
        subject's v."""
        _, _, rho, rho_v, theta, theta_v, _ = t
        xr, xp = (rho + rho_v * v)[self.subject], (theta - theta_v * v)[self.subject]
        rec, pull, active = self._rec_pull(np.maximum(0.0, rho + rho_v * v), np.maximum(0.0, theta - theta_v * v))
        _, g = self.loglik(t[0], t[1], t[6], rec, pull, grad=True)
        gR = g[0] * active * self.rec_lin * (xr > 0)
        gP = g[1] * self.d * (xp > 0)
        vs = v[self.subject]
        return np.column_stack([g[2], g[3], gR, gR * vs, gP, -gP * vs, g[4], gR * rho_v - gP * theta_v])

    def structural(self, t: np.ndarray, v: np.ndarray, grad: bool = False):
        """Per-subject log-likelihood of the model's parameters ``t`` (:data:`UPDATE_PARAMS`) and
        verifiabilities ``v`` (all subjects); with ``grad`` also its (S, 7) gradient in t and (S,) in v."""
        _, _, rho, rho_v, theta, theta_v, _ = t
        xr, xp = rho + rho_v * v, theta - theta_v * v
        R, P = np.maximum(0.0, xr), np.maximum(0.0, xp)
        w = np.array([t[0], t[1], t[6]])
        if not grad:
            return self.subject_terms(w, R, P)
        ll, gw, gR, gP = self.subject_terms(w, R, P, grad=True)
        gR, gP = gR * (xr > 0), gP * (xp > 0)
        gt = np.column_stack([gw[:, 0], gw[:, 1], gR, gR * v, gP, -gP * v, gw[:, 2]])
        return ll, gt, gR * rho_v - gP * theta_v


def _log_softmax_parts(x: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray]:
    """log(sum(exp(x))) along ``axis`` and softmax(x) along it (-inf entries allowed)."""
    m = np.max(x, axis=axis, keepdims=True)
    e = np.exp(x - m)
    total = e.sum(axis=axis, keepdims=True)
    return np.log(np.squeeze(total, axis)) + np.squeeze(m, axis), e / total


@dataclass
class Start:
    """One structural start: where it began and the log-likelihood it ended at."""

    name: str
    nll: float
    t: np.ndarray = field(repr=False)
    v: np.ndarray = field(repr=False)


@dataclass
class UpdateFit:
    """The result of :func:`fit_updates`. ``t``: the 7 parameters (kept ones at the start's value), ``se``
    their standard errors (NaN: not fitted or not identified), ``status`` per parameter ("fitted",
    "at bound", "not identified", "kept"), ``v`` / ``v_se`` / ``v_status`` for the subjects in ``subjects``,
    ``cov``/``cov_names`` the joint covariance of the fitted ones, ``notes`` what the search found."""

    t: np.ndarray
    se: np.ndarray
    status: list[str]
    subjects: list[int]
    v: np.ndarray
    v_se: np.ndarray
    v_status: list[str]
    cov: np.ndarray
    cov_names: list[str]
    starts: list[Start]
    nll: float
    notes: list[str]


def _minimize(fun, x0: np.ndarray, bounds: list[tuple[float, float]], maxiter: int = 500) -> np.ndarray:
    from scipy.optimize import minimize

    x = np.clip(x0, [b[0] for b in bounds], [b[1] for b in bounds])
    res = minimize(fun, x, jac=True, method="L-BFGS-B", bounds=bounds,
                   options={"maxiter": maxiter, "ftol": 1e-10, "gtol": 1e-5})
    return res.x


class _Search:
    """The search of :func:`fit_updates` over one :class:`UpdateModel`. A point is (t, v): the 7 parameters
    and the verifiabilities over all subjects (only those of ``subjects`` move)."""

    def __init__(self, um: UpdateModel, t0: np.ndarray, v0: np.ndarray, subjects: list[int], fit_fresh: bool):
        self.um, self.t0, self.v0 = um, t0.astype(float), v0.astype(float)
        self.sel = np.array(subjects, dtype=int)
        self.free = [k for k in range(7) if fit_fresh or k != 0]
        self.fit_v = len(subjects) > 0

    def unpack(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        t, v = self.t0.copy(), self.v0.copy()
        t[self.free] = x[:len(self.free)]
        v[self.sel] = x[len(self.free):]
        return t, v

    def pack(self, t: np.ndarray, v: np.ndarray) -> np.ndarray:
        return np.concatenate([t[self.free], v[self.sel]])

    def objective(self, x: np.ndarray):
        t, v = self.unpack(x)
        ll, gt, gv = self.um.structural(t, v, grad=True)
        return -ll.sum(), -np.concatenate([gt.sum(0)[self.free], gv[self.sel]])

    def bounds(self) -> list[tuple[float, float]]:
        return [BOUNDS[k] for k in self.free] + [(-1.0, 1.0)] * len(self.sel)

    def nll(self, t: np.ndarray, v: np.ndarray) -> float:
        return float(-self.um.structural(t, v).sum())

    def grid_v(self, t: np.ndarray, v: np.ndarray) -> np.ndarray:
        """Each fitted subject's v at the best point of :data:`V_GRID` given ``t`` (its own likelihood
        depends on its own v alone), kept where the grid is no better than the current value."""
        best = -self.um.structural(t, v)[self.sel]
        out = v.copy()
        for g in V_GRID:
            trial = v.copy()
            trial[self.sel] = g
            f = -self.um.structural(t, trial)[self.sel]
            better = f < best - 1e-9
            out[self.sel[better]] = g
            best = np.where(better, f, best)
        return out

    def polish(self, t: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
        """L-BFGS-B from (t, v) (the v first re-spanned to [-V_SPAN, V_SPAN]), then a grid step on the v;
        again while the grid step moves some v (at most :data:`POLISH_ROUNDS` times)."""
        for _ in range(POLISH_ROUNDS):
            if self.fit_v:
                t, v_sel = _in_box(t, v[self.sel])
                v = v.copy()
                v[self.sel] = v_sel
            t, v = self.unpack(_minimize(self.objective, self.pack(t, v), self.bounds()))
            if not self.fit_v:
                break
            moved = self.grid_v(t, v)
            if np.array_equal(moved, v):
                break
            v = moved
        return t, v, self.nll(t, v)

    def free_stage(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
        """The saturated fit: (w_fresh, w_peer, tau) and, per fitted subject, R_s and P_s free. Returns
        (w, R, P) over the fitted subjects and its negative log-likelihood."""
        um, sel = self.um, self.sel
        wk = [k for k in (0, 1, 6) if k in self.free]
        widx = [(0, 1, 6).index(k) for k in wk]
        t0 = self.t0
        R0 = np.maximum(0.0, t0[2] + t0[3] * self.v0)
        P0 = np.maximum(0.0, t0[4] - t0[5] * self.v0)
        k, s = len(wk), len(sel)

        def split(x):
            w = np.array([t0[0], t0[1], t0[6]])
            w[widx] = x[:k]
            R, P = R0.copy(), P0.copy()
            R[sel], P[sel] = x[k:k + s], x[k + s:]
            return w, R, P

        def objective(x):
            ll, gw, gR, gP = um.subject_terms(*split(x), grad=True)
            return -ll.sum(), -np.concatenate([gw.sum(0)[widx], gR[sel], gP[sel]])

        bounds = [BOUNDS[j] for j in wk] + [FREE_BOUND] * (2 * s)
        x = np.concatenate([t0[wk], np.maximum(R0[sel], 0.5), np.maximum(P0[sel], 0.5)])
        for _ in range(2):  # a restart from the optimum: the scores have kinks (max(0, .))
            x = _minimize(objective, x, bounds)
        w, R, P = split(x)
        return w, R[sel], P[sel], float(-um.subject_terms(w, R, P).sum())

    def line_start(self, w: np.ndarray, R: np.ndarray, P: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        """(t, v) whose R_s, P_s lie on the weighted principal line through the free stage's points (None
        when they do not spread)."""
        n = self.um.counts[self.sel].astype(float)
        pts = np.column_stack([R, P])
        mu = n @ pts / n.sum()
        cov = ((pts - mu).T * n) @ (pts - mu) / n.sum()
        u = np.linalg.eigh(cov)[1][:, -1]
        pos = (pts - mu) @ u
        if np.ptp(pos) < 1e-6:
            return None
        mid, half = (pos.max() + pos.min()) / 2, np.ptp(pos) / 2 / V_SPAN
        t = self.t0.copy()
        t[0], t[1], t[6] = w
        t[2], t[3] = mu[0] + u[0] * mid, u[0] * half
        t[4], t[5] = mu[1] + u[1] * mid, -u[1] * half
        v = self.v0.copy()
        v[self.sel] = (pos - mid) / half
        return np.clip(t, [b[0] for b in BOUNDS], [b[1] for b in BOUNDS]), v


def fit_updates(um: UpdateModel, t0: np.ndarray, v0: np.ndarray, subjects: list[int], fit_fresh: bool,
                gauge: Gauge | None, seed: int = 0) -> UpdateFit:
    """Maximise the update calls' likelihood over the 7 parameters (w_fresh only with ``fit_fresh``) and
    the v of ``subjects`` (indices into the data's subjects; at least :data:`MIN_V_SUBJECTS`, else none
    are fitted and every v stays at ``v0``). ``t0``, ``v0``: the base's values (v0 over all subjects);
    ``gauge``: where the fitted v are reported (:class:`Gauge`, None: as found). The random starts come
    from ``numpy.random.default_rng(seed)``."""
    if len(subjects) < MIN_V_SUBJECTS:
        subjects = []
    search = _Search(um, t0, v0, subjects, fit_fresh)
    rng = np.random.default_rng(seed)
    notes: list[str] = []
    starts: list[Start] = []

    def run(name: str, t: np.ndarray, v: np.ndarray) -> None:
        t, v, f = search.polish(t, v)
        starts.append(Start(name, f, t, v))

    free_nll = None
    if subjects:
        w, R, P, free_nll = search.free_stage()
        line = search.line_start(w, R, P)
        if line is not None:
            run("free stage", *line)
        run("base", t0.copy(), v0.copy())
        for k in range(RANDOM_STARTS):
            t = t0.copy()
            t[0], t[1], t[6] = w
            t[2:6] = rng.uniform([-1.0, 0.3, -0.5, 0.3], [1.0, 3.0, 1.5, 3.0])
            run(f"random {k + 1}", t, search.grid_v(t, v0))
    else:
        run("base", t0.copy(), v0.copy())
    best = min(starts, key=lambda s: s.nll)
    reached = sum(s.nll - best.nll <= AGREE for s in starts)
    worst = max(starts, key=lambda s: s.nll)
    notes.append(f"update calls: the best of {len(starts)} starts ({best.name!r}) is reported; {reached} of them "
                 f"reached it within {AGREE} nats, the worst ({worst.name!r}) ended {worst.nll - best.nll:.2f} "
                 "nats below it")
    if free_nll is not None:
        from scipy.stats import chi2

        df = len(subjects) - 2
        lr = max(0.0, 2 * (best.nll - free_nll))
        p = float(chi2.sf(lr, df))
        verdict = ("follow" if p >= 0.01 else "do NOT follow")
        notes.append(f"the subjects' recognition and trap pull {verdict} the model's max(0, rho + rho_v v_s) and "
                     f"max(0, theta - theta_v v_s) (likelihood ratio against a free recognition and pull per subject: "
                     f"{lr:.1f} on {df} df, p = {p:.3g})" + ("" if p >= 0.01 else "; the team's skills may differ from "
                                                             "the base team's by subject: check the predictive check"))
    t, v = best.t, best.v
    # bounds are judged where the search ran (the gauge map moves them)
    on_bound = [at_bound(t[k], BOUNDS[k]) if k in search.free else None for k in range(7)]
    sel = search.sel
    if subjects and gauge is not None:
        t, v_sel, mapped = to_gauge(t, v[sel], gauge)
        v = v.copy()
        v[sel] = v_sel
        if mapped:
            notes.append("the fitted verifiabilities are expressed with the base's weighted mean and spread over the "
                         "fitted subjects, sign rho_v + theta_v >= 0 (rho, rho_v, theta, theta_v and an affine map of "
                         "v are not separately identified)")
        else:
            gauge = None
    se_all, cov, names = _errors(search, t, v, gauge)
    k = len(search.free)
    se = np.full(7, np.nan)
    se[search.free] = se_all[:k]
    status = []
    for j in range(7):
        if j not in search.free:
            status.append("kept")
        elif on_bound[j]:
            status.append("at bound")
        elif not np.isfinite(se[j]):
            status.append("not identified")
        else:
            status.append("fitted")
    v_se = se_all[k:]
    v_status = ["fitted" if np.isfinite(x) else "not identified" for x in v_se]
    if any(status[j] != "fitted" for j in (2, 3, 4, 5)) and len(sel):
        # the v are only meaningful on the lines the four globals draw: without those, none is identified
        v_status = ["not identified"] * len(sel)
        v_se = np.full(len(sel), np.nan)
        notes.append("the traces identify each subject's recognition and trap pull, but not their split into rho, "
                     "rho_v, theta, theta_v and the verifiabilities (some of the four are on a bound or not "
                     "identified): the written profile reproduces the recognition and pull, its verifiabilities "
                     "are one split among many")
    return UpdateFit(t, se, status, list(sel), v[sel], v_se, v_status, cov, names, starts, best.nll, notes)


def _errors(search: _Search, t: np.ndarray, v: np.ndarray, gauge: Gauge | None):
    """Standard errors of the free globals and the fitted v: the inverse of the information
    sum_j s_j s_j^T, s_j the gradient of task j's update calls (the outer product of the scores,
    clustered by task: it needs no second derivative across the corners of max(0, .) and allows for
    the calls of one task sharing its latent, in one episode or several), in the directions that keep
    the gauge when one is given. A direction no call's likelihood moves along is flat: the parameters it moves are not
    identified (NaN)."""
    um, free, sel = search.um, search.free, search.sel
    k, s = len(free), len(sel)
    per_call = um.call_scores(t, v)
    scores = np.zeros((len(um.calls), k + s))
    scores[:, :k] = per_call[:, free]
    for j, subject in enumerate(sel):
        scores[:, k + j] = np.where(um.subject == subject, per_call[:, 7], 0.0)
    tasks = np.unique(um.task, return_inverse=True)[1]
    clustered = np.zeros((tasks.max() + 1, k + s))
    np.add.at(clustered, tasks, scores)
    info = clustered.T @ clustered
    names = [UPDATE_PARAMS[j] for j in free] + [f"v[{j}]" for j in sel]
    if gauge is not None and s:
        vs = v[sel]
        w = gauge.weights
        _, _, vt = np.linalg.svd(np.vstack([w, w * (vs - w @ vs)]))
        B = vt[2:].T
        J = np.zeros((k + s, k + B.shape[1]))
        J[:k, :k] = np.eye(k)
        J[k:, k:] = B
        se, cov = std_errors(J.T @ info @ J, basis=J)
    else:
        se, cov = std_errors(info)
    return se, cov, names
