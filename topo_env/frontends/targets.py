"""Who a selective_query or debate_check points at: deterministic rules over last round.

Every rule is vectorised over a batch of episodes, so the PettingZoo env (batch of one) and
the batch simulator share one implementation.

* ``ring``: agent i targets (i + 1) mod N, always (what the paper's code does).
* ``disagree`` (default): the peer whose last answer differs from i's; among several, the
  most confident one; remaining ties go to ring order (i+1, i+2, ...). If every peer agrees
  with i, the most confident peer. Round 0 (nothing said yet): ring.
* ``confident``: the most confident peer of last round, ties in ring order. Round 0: ring.

A missing answer (``-1`` code) never agrees with anyone; a missing confidence counts 0.5.
"""
from __future__ import annotations

import numpy as np

TARGET_RULES: tuple[str, ...] = ("disagree", "confident", "ring")


def choose_targets(rule: str, answers: np.ndarray | None, confidences: np.ndarray | None, n_agents: int) -> np.ndarray:
    """Targets for a batch of episodes.

    Args:
        rule: one of :data:`TARGET_RULES`.
        answers: (B, N) int answer codes of last round (equal code = same answer; -1 =
            no answer), or ``None`` in round 0.
        confidences: (B, N) float confidences of last round, or ``None`` in round 0.
        n_agents: N.

    Returns:
        (B, N) int64 targets (B = 1 when ``answers`` is None).
    """
    if rule not in TARGET_RULES:
        raise ValueError(f"unknown target_rule {rule!r}; known rules: {list(TARGET_RULES)}")
    n = n_agents
    offsets = np.arange(1, n)  # candidate k is peer (i + k) mod N: already in ring order
    cand = (np.arange(n)[:, None] + offsets[None, :]) % n  # (N, N-1)
    if rule == "ring" or answers is None:
        batch = 1 if answers is None else answers.shape[0]
        return np.broadcast_to(cand[:, 0], (batch, n)).astype(np.int64)
    ans = np.asarray(answers)
    conf = np.asarray(confidences, dtype=np.float64)
    peer_ans = ans[:, cand]  # (B, N, N-1)
    peer_conf = conf[:, cand]
    order = np.argsort(-peer_conf, axis=-1, kind="stable")
    if rule == "disagree":
        agrees = (peer_ans == ans[:, :, None]) & (peer_ans >= 0)
        agrees_sorted = np.take_along_axis(agrees, order, axis=-1)
        order = np.take_along_axis(order, np.argsort(agrees_sorted, axis=-1, kind="stable"), axis=-1)
    best = order[..., 0]  # (B, N) index into candidates
    return cand[np.arange(n)[None, :], best].astype(np.int64)


def choose_targets_one(rule: str, answers: list[int] | None, confidences: list[float] | None, n_agents: int) -> list[int]:
    """:func:`choose_targets` for one episode in plain Python (the env's hot path; tests
    hold the two equal)."""
    if rule not in TARGET_RULES:
        raise ValueError(f"unknown target_rule {rule!r}; known rules: {list(TARGET_RULES)}")
    n = n_agents
    if rule == "ring" or answers is None:
        return [(i + 1) % n for i in range(n)]
    out = []
    for i in range(n):
        best_key, best = None, -1
        for k in range(1, n):  # ring order breaks remaining ties
            j = (i + k) % n
            agrees = rule == "disagree" and answers[j] >= 0 and answers[j] == answers[i]
            key = (agrees, -confidences[j])
            if best_key is None or key < best_key:
                best_key, best = key, j
        out.append(best)
    return out
