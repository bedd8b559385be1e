"""Fingerprints of PettingZoo-env episodes: a snapshot that holds the env bit for bit across refactors.

``record()`` plays seeded episodes through the public PettingZoo API (random valid actions from a
seeded generator) and returns, per step, the rewards, the infos (minus ``action_mask``, which left
the infos) and SHA-256 digests of the observations, the state and the transcript. The snapshot
``tests/data/pz_episodes_snapshot.json`` is written by the code itself, with ``python
tests/regression_episodes.py tests/data/pz_episodes_snapshot.json``: first by the env before the
episode engine (``topo_env.engine.episode``) replaced its inline round logic, then again whenever the
simulated team's model changed on purpose (subjects, traps, updates: issue 26). It proves only that
nothing changed since it was written; ``tests/test_engine.py`` checks what the episodes should be
independently (the env against the engine playing the same graphs, and Eq. 12).
"""
from __future__ import annotations

import hashlib
import json
import sys

import numpy as np

import topo_env

CASES: dict[str, dict] = {
    "mmlu_pro": {"profile": "mmlu_pro", "rounds": 2},
    "aime25_t3": {"profile": "aime25", "rounds": 3},
    "humaneval_ring": {"profile": "humaneval", "rounds": 2, "target_rule": "ring"},
    "livecodebench_confident_shaped": {"profile": "livecodebench", "rounds": 2, "target_rule": "confident",
                                       "reward_mode": "shaped"},
    "mmlu_pro_adversary": {"profile": "mmlu_pro", "rounds": 2, "adversarial_agents": [1]},
    "hmmt_random_adversary_n4": {"profile": "hmmt25", "rounds": 2, "n_agents": 4, "adversary_position": "random",
                                 "n_adversaries": 1},
}
EPISODES = 12
NEW_INFO_KEYS = ("action_mask", "sent_to")
"""Left out of the comparison: ``action_mask`` left the infos with the engine, ``sent_to`` came."""


def _digest(x) -> str:
    return hashlib.sha256(np.ascontiguousarray(x).tobytes()).hexdigest()[:16]


def _plain(v):
    if isinstance(v, np.ndarray):
        return v.tolist()
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.floating,)):
        return float(v)
    return v


def record_case(config: dict, episodes: int = EPISODES) -> list[dict]:
    env = topo_env.parallel_env(render_mode="ansi", **config)
    rng = np.random.default_rng(1234)
    out = []
    for ep in range(episodes):
        obs, infos = env.reset(seed=100 + ep, options={"split": "eval" if ep % 2 else "train"})
        steps = [{"obs": _digest(np.stack([obs[a]["observation"] for a in env.possible_agents])),
                  "state": _digest(env.state()),
                  "infos": {a: {k: _plain(v) for k, v in i.items() if k not in NEW_INFO_KEYS} for a, i in infos.items()}}]
        while env.agents:
            actions = {a: int(rng.integers(6)) for a in env.agents}
            obs, rewards, terms, truncs, infos = env.step(actions)
            steps.append({
                "actions": actions,
                "obs": _digest(np.stack([obs[a]["observation"] for a in env.possible_agents])),
                "state": _digest(env.state()),
                "rewards": {a: float(r) for a, r in rewards.items()},
                "terminations": {a: bool(t) for a, t in terms.items()},
                "infos": {a: {k: _plain(v) for k, v in i.items() if k not in NEW_INFO_KEYS} for a, i in infos.items()},
            })
        steps.append({"transcript": hashlib.sha256(env.render().encode()).hexdigest()[:16]})
        out.append({"seed": 100 + ep, "steps": steps})
    return out


def record() -> dict:
    return {name: record_case(cfg) for name, cfg in CASES.items()}


if __name__ == "__main__":
    with open(sys.argv[1], "w") as fh:
        json.dump(record(), fh, separators=(",", ":"))
