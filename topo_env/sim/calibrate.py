"""Fit and check the simulated team against the paper's Table 1 and Table 3.

For each profile, with N=3 and the domain's rounds (math 3, code and reasoning 2):

* ``alpha`` is fitted by bisection so that one specialist answering directly reaches the
  "Base (direct)" accuracy;
* the team effect is fitted so that the fully connected team (everyone broadcast_all every
  round, then FinalRefer) reaches the "LLM-Debate" accuracy: a value x >= 0 is the base
  recognition ``rho`` of a right answer a peer shows; x < 0 keeps ``rho = 0`` and raises the
  trap's pull ``theta`` to BASE_THETA - x (peers mislead: HumanEval's debate is slightly worse
  than a single agent).

Both fits use common random numbers. ``python -m topo_env.sim.calibrate`` prints the
measured figures of the shipped profiles; ``--fit`` refits and prints the values to paste
into ``topo_env/sim/profiles.py``.
"""
from __future__ import annotations

import argparse

import numpy as np

from topo_env.sim.batch import BatchRoundSpec, BatchSimulator
from topo_env.sim.profiles import PROFILES, SimProfile, get_profile, profile_argument, with_overrides
from topo_env.engine.tasks import DEFAULT_ROUNDS

BASE_THETA: float = SimProfile.__dataclass_fields__["theta"].default


def _same_graph_every_round(adjacency: np.ndarray, batch: int, rounds: int) -> list[BatchRoundSpec]:
    """``rounds`` rounds of one (N, N) graph in every episode, everyone active, nobody verified
    (the fully connected team: all ones off the diagonal; the all-solo team: no edges)."""
    n = adjacency.shape[0]
    spec = BatchRoundSpec(np.broadcast_to(adjacency, (batch, n, n)).copy(), np.ones((batch, n), bool),
                          np.zeros((batch, n), bool))
    return [spec] * rounds


def measure(profile: SimProfile, samples: int = 20000, seed: int = 0) -> dict[str, float]:
    """Direct single-agent, all-solo team and fully connected team, on the same tasks."""
    rounds = DEFAULT_ROUNDS[profile.domain]
    sim = BatchSimulator(profile, 3, rounds)
    tasks, noise = sim.sample(np.random.default_rng(seed), samples)
    direct_acc, direct_tok = sim.direct(tasks, noise)
    full = sim.run_specs(_same_graph_every_round(1 - np.eye(3, dtype=np.int8), samples, rounds), tasks, noise)
    solo = sim.run_specs(_same_graph_every_round(np.zeros((3, 3), np.int8), samples, rounds), tasks, noise)
    return {
        "direct_accuracy": float(direct_acc.mean()),
        "full_accuracy": float(full.accuracy.mean()),
        "solo_accuracy": float(solo.accuracy.mean()),
        "direct_tokens": float(direct_tok.mean()),
        "solo_tokens": float(solo.tokens.mean()),
        "full_tokens": float(full.tokens.mean()),
        "solo_reward": float(solo.reward.mean()),
        "full_reward": float(full.reward.mean()),
    }


def team_effect(x: float) -> dict[str, float]:
    """The (rho, theta) pair that team-effect value x stands for (see module docstring)."""
    return {"rho": x, "theta": BASE_THETA} if x >= 0 else {"rho": 0.0, "theta": BASE_THETA - x}


def _bisect(f, lo: float, hi: float, iters: int = 30) -> float:
    flo = f(lo)
    for _ in range(iters):
        mid = 0.5 * (lo + hi)
        fm = f(mid)
        if (fm > 0) == (flo > 0):
            lo, flo = mid, fm
        else:
            hi = mid
    return 0.5 * (lo + hi)


def calibrate_profile(profile: SimProfile, samples: int = 20000, seed: int = 1) -> SimProfile:
    """``profile`` with ``alpha``, ``rho`` and ``theta`` fitted to its Table 1 targets."""
    def direct_gap(alpha: float) -> float:
        return measure_direct(with_overrides(profile, alpha=alpha), samples, seed) - profile.base_accuracy

    alpha = _bisect(direct_gap, -4.0, 12.0, iters=25)
    fitted = with_overrides(profile, alpha=round(alpha, 3))

    def full_gap(x: float) -> float:
        p = with_overrides(fitted, **team_effect(x))
        return measure(p, samples, seed)["full_accuracy"] - profile.debate_accuracy

    x = _bisect(full_gap, -3.0, 12.0, iters=18)
    return with_overrides(fitted, **{k: round(v, 3) for k, v in team_effect(x).items()})


def measure_direct(profile: SimProfile, samples: int, seed: int) -> float:
    sim = BatchSimulator(profile, 3, 1)
    tasks, noise = sim.sample(np.random.default_rng(seed), samples)
    return float(sim.direct(tasks, noise)[0].mean())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fit", action="store_true", help="refit alpha / rho / theta and print them")
    parser.add_argument("--samples", type=int, default=20000)
    parser.add_argument("--profile", type=profile_argument, nargs="*", default=sorted(PROFILES),
                        help="built-in profile names or profile YAML files (default: every built-in profile)")
    args = parser.parse_args(argv)
    header = f"{'profile':<14}{'direct':>8}{'target':>8}{'full':>8}{'target':>8}{'solo':>8}" \
             f"{'tok direct':>12}{'tok solo':>10}{'tok full':>10}"
    print(header)
    for name in args.profile:
        p = get_profile(name)
        if args.fit and p.base_accuracy is not None:
            p = calibrate_profile(p, args.samples)
            print(f"# {name}: alpha={p.alpha}, rho={p.rho}, theta={p.theta}", flush=True)
        m = measure(p, args.samples, seed=12345)
        targets = [("-" if t is None else f"{t:.3f}") for t in (p.base_accuracy, p.debate_accuracy)]
        print(f"{name:<14}{m['direct_accuracy']:>8.3f}{targets[0]:>8}{m['full_accuracy']:>8.3f}"
              f"{targets[1]:>8}{m['solo_accuracy']:>8.3f}{m['direct_tokens']:>12.0f}"
              f"{m['solo_tokens']:>10.0f}{m['full_tokens']:>10.0f}", flush=True)


if __name__ == "__main__":
    main()
