"""Numerical pieces shared by the fit's modules (:mod:`topo_env.fitting.fit_ability`,
:mod:`topo_env.fitting.fit_updates` and the other parameter groups):
stable sigmoid and log-sum-exp, Gauss-Hermite nodes, finite-difference Hessians, standard errors that
say which parameters the likelihood leaves flat, and the test of a parameter sitting on its bound."""
from __future__ import annotations

import numpy as np

FLAT = 1e-9  # a Hessian eigenvalue below FLAT x the largest is a flat direction of the likelihood
LOADING = 0.05  # a parameter loading more than this on a flat direction is not identified
AT_BOUND = 1e-4  # an estimate this close to a bound (relative to max(1, |bound|)) sits on it


def sig(x):
    return 1.0 / (1.0 + np.exp(-x))


def log_sig(x):
    return -np.logaddexp(0.0, -x)


def lse(x: np.ndarray, axis: int) -> np.ndarray:
    """log(sum(exp(x))) along ``axis`` (-inf entries allowed; faster than np.logaddexp.reduce)."""
    m = np.max(x, axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    return np.log(np.sum(np.exp(x - m), axis=axis)) + np.squeeze(m, axis=axis)


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """exp(x) normalised to sum 1 along ``axis``: probabilities from unnormalised log weights."""
    return np.exp(x - np.expand_dims(lse(x, axis), axis))


def gauss_hermite(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Gauss-Hermite nodes and log weights for E[f(Z)], Z ~ N(0, 1)."""
    x, w = np.polynomial.hermite_e.hermegauss(n)
    return x, np.log(w / w.sum())


def hessian(fun, x: np.ndarray, step: float = 1e-4, blocks: np.ndarray | None = None) -> np.ndarray:
    """Central-difference Hessian of a scalar function (or Jacobian of a gradient when ``fun``
    returns (value, grad)).

    ``blocks`` (with a gradient only): ``blocks[a]`` >= 0 is parameter a's block, -1 marks a shared
    parameter, with the contract that the gradient along a parameter of block b depends on block b's
    and the shared parameters only (the attempt model: every task belongs to one subject). One
    gradient evaluation then moves the j-th parameter of every block at once (the column grouping of
    Curtis, Powell and Reid, 1974): the Hessian costs (shared + largest block) evaluations instead of
    one per parameter, and its block entries are the ones the one-at-a-time differences give."""
    k = len(x)
    h = np.zeros((k, k))
    probe = fun(x)
    if isinstance(probe, tuple):  # forward differences of the analytic gradient
        steps = np.array([step * max(1.0, abs(v)) for v in x])
        blocks = np.full(k, -1) if blocks is None else np.asarray(blocks)
        for a in np.flatnonzero(blocks < 0):
            e = np.zeros(k)
            e[a] = steps[a]
            h[a] = (fun(x + e)[1] - probe[1]) / steps[a]
        members = [np.flatnonzero(blocks == b) for b in np.unique(blocks[blocks >= 0])]
        for j in range(max((len(m) for m in members), default=0)):
            moved = np.array([m[j] for m in members if j < len(m)])
            e = np.zeros(k)
            e[moved] = steps[moved]
            change = fun(x + e)[1] - probe[1]
            for m in members:
                if j < len(m):
                    h[m[j], m] = change[m] / steps[m[j]]
        shared = blocks < 0
        h[np.ix_(~shared, shared)] = h[np.ix_(shared, ~shared)].T  # read off the shared parameters' rows
        return (h + h.T) / 2
    f0 = probe
    steps = np.array([step * 10 * max(1.0, abs(v)) for v in x])
    for a in range(k):
        for b in range(a, k):
            ea, eb = np.zeros(k), np.zeros(k)
            ea[a], eb[b] = steps[a], steps[b]
            if a == b:
                val = (fun(x + ea) - 2 * f0 + fun(x - ea)) / steps[a] ** 2
            else:
                val = (fun(x + ea + eb) - fun(x + ea - eb) - fun(x - ea + eb) + fun(x - ea - eb)) / (4 * steps[a] * steps[b])
            h[a, b] = h[b, a] = val
    return h


def std_errors(h: np.ndarray, basis: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Standard errors and covariance from the Hessian (or information) ``h`` of a negative
    log-likelihood at its minimum; with ``basis`` (k x r), ``h`` is over the r coordinates of
    parameters = basis @ coordinates (directions that keep a gauge), and the results are over the k
    parameters. Directions in which the likelihood is flat (eigenvalue below :data:`FLAT` times the
    largest, or negative: not a maximum there) carry no information: a parameter that such a
    direction moves by more than :data:`LOADING` (its unit vector mapped through ``basis``) gets the
    standard error NaN (not identified) and NaN covariances; the others' come from the inverse on the
    remaining directions."""
    r = h.shape[0]
    basis = np.eye(r) if basis is None else np.asarray(basis, dtype=float)
    k = basis.shape[0]
    if r == 0:
        return np.zeros(k), np.zeros((k, k))
    if not np.isfinite(h).all():
        return np.full(k, np.nan), np.full((k, k), np.nan)
    lam, q = np.linalg.eigh((h + h.T) / 2)
    top = max(float(np.abs(lam).max()), 1e-300)
    good = lam > FLAT * top
    cov = basis @ ((q[:, good] / lam[good]) @ q[:, good].T) @ basis.T
    moves = basis @ q[:, ~good]
    moves = moves / np.maximum(np.linalg.norm(moves, axis=0), 1e-300)
    flat = (np.abs(moves) > LOADING).any(axis=1)
    cov[flat, :] = np.nan
    cov[:, flat] = np.nan
    se = np.sqrt(np.clip(np.diag(cov), 0.0, None))
    return se, cov


def at_bound(value: float, bounds: tuple[float, float] | None) -> str | None:
    """``"lower"`` / ``"upper"`` when ``value`` sits on that end of ``bounds`` (within :data:`AT_BOUND`),
    else None."""
    if bounds is None:
        return None
    lo, hi = bounds
    if lo is not None and value - lo <= AT_BOUND * max(1.0, abs(lo)):
        return "lower"
    if hi is not None and hi - value <= AT_BOUND * max(1.0, abs(hi)):
        return "upper"
    return None
