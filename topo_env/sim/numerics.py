"""The two kinds of numbers the simulated team's model runs on: one call's Python numbers, or arrays.

Each behaviour in :mod:`topo_env.sim.model` is written once, as a function of ``xp``:
:data:`SCALARS` on the per-episode path (:class:`topo_env.sim.team.SimTeamBackend`: one call, Python
floats, ints and bools, :mod:`math`), :data:`ARRAYS` on the batch path
(:class:`topo_env.sim.batch.BatchSimulator`: numpy arrays of shape (m,), one entry per episode).
Arithmetic, comparisons and ``&`` / ``|`` on booleans mean the same for both kinds as written;
anything else goes through ``xp``: a choice by value (``xp.where``; an ``if`` only on ``xp.any(...)``
or on the call's shape, such as ``previous is None``), a negation (``xp.logical_not``, never ``~``,
which turns a Python ``True`` into -2), and every function (``xp.exp``, not ``np.exp``). Each path keeps its own floating-point library (``math.exp`` or
``np.exp``); the two may differ in the last bit, so tests compare the paths' confidences to 1e-12
(``tests/test_batch_sim.py``).

Noise is read as ``noise[k]``: one call's noise vector (a list of floats) on the per-episode path,
the (L, m) transpose of the (m, L) noise rows on the batch path (``noise[k]`` is entry k of each row).
"""
from __future__ import annotations

import bisect
import math
import operator

import numpy as np


class ScalarMath:
    """``xp`` for one call: Python numbers in, Python numbers out (no array boxing: the env's speed).
    Where a C function already does the job it is used as is (``bool``, ``math.floor``, ``bisect``)."""

    exp = staticmethod(math.exp)
    maximum = staticmethod(max)
    minimum = staticmethod(min)
    logical_not = staticmethod(operator.not_)
    any = staticmethod(bool)
    floor_int = staticmethod(math.floor)  # -> int
    bucket = staticmethod(bisect.bisect_right)  # (cdf, u): index of u's bucket in the cumulative cdf
    pick = staticmethod(operator.getitem)  # (noise, index): the noise vector's entry at index

    @staticmethod
    def where(condition, if_true, if_false):
        return if_true if condition else if_false

    @staticmethod
    def clip(x, low, high):
        return min(max(x, low), high)

    @staticmethod
    def full(like, value):
        """``value`` shaped as ``like`` (here: ``value`` itself)."""
        return value


class ArrayMath:
    """``xp`` for a batch: (m,) numpy arrays in and out (Python numbers broadcast)."""

    exp = staticmethod(np.exp)
    maximum = staticmethod(np.maximum)
    minimum = staticmethod(np.minimum)
    where = staticmethod(np.where)
    logical_not = staticmethod(np.logical_not)
    clip = staticmethod(np.clip)

    @staticmethod
    def any(x) -> bool:
        return bool(np.any(x))

    @staticmethod
    def floor_int(x) -> np.ndarray:
        return np.floor(x).astype(np.int64)

    @staticmethod
    def full(like, value) -> np.ndarray:
        """``value`` shaped as ``like``."""
        return np.full(np.shape(like), value)

    @staticmethod
    def bucket(cdf, u) -> np.ndarray:
        """Index of the bucket of each ``u`` in the cumulative ``cdf`` (searchsorted right)."""
        return np.searchsorted(cdf, u, side="right")

    @staticmethod
    def pick(noise, index) -> np.ndarray:
        """``noise[index[r], r]`` for each row r of the (L, m) noise: row r's entry at its own index."""
        return noise[index, np.arange(noise.shape[1])]


SCALARS = ScalarMath
ARRAYS = ArrayMath
