"""Is the small joint-action library enough for the teacher at N = 3? (issue 49)

From N = 4 on, a climb's whole-joint-action moves try only the uniform and baseline joint actions
(:func:`topo_env.references.headroom.named_joint_actions`); at N = 3 they try all 216. This searches the
teacher's references (what the task text tells) at N = 3, T = 2 with the small library, enumerates them
too, and plays each as training's teacher plays it (each episode's subject read from its text) on the
held-out episodes of runs of ``--seeds``: the searched minus the enumerated teacher, paired.

    python -m experiments.teacher_library_check --profile humaneval
"""
from __future__ import annotations

import argparse
import time
from collections.abc import Sequence

import numpy as np

from experiments.teacher_ceiling import held_out
from learners.config import load_experiment
from topo_env.frontends.vector_env import SimVectorEnv
from topo_env.references import headroom


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m experiments.teacher_library_check", description=__doc__.split("\n\n")[0])
    p.add_argument("--profile", default="mmlu_pro")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--episodes", type=int, default=20000)
    args = p.parse_args(argv)
    cfg = load_experiment("configs/default.yaml", [f"env.profile={args.profile}"])
    venv = SimVectorEnv(cfg.env)
    sim, selection = venv.sim, headroom.REFERENCE_SELECTION
    started = time.perf_counter()
    enumerated, _ = headroom.select_references(sim, seed=0, progress=False,
                                               context=headroom.readable_context(sim.profile, 0), **selection)
    enumerated_s, started = time.perf_counter() - started, time.perf_counter()
    full_library = headroom.joint_library
    headroom.joint_library = headroom.named_joint_actions
    try:
        searched, _ = headroom.select_searched_references(sim, 0, selection["samples"], selection["rerank_samples"],
                                                          False, headroom.readable_context(sim.profile, 0))
    finally:
        headroom.joint_library = full_library
    print(f"{args.profile}, N = 3, T = 2: enumerated {enumerated_s:.0f} s, searched with the small library "
          f"{time.perf_counter() - started:.0f} s")
    for seed in args.seeds:
        run = held_out(venv, cfg.env, seed, args.episodes)
        best_fixed, adaptive = run.best_fixed.mean(), run.adaptive.mean()
        a = headroom.play_policies(sim, enumerated.policies("adaptive", run.rows, sim), *run.arrays).reward
        b = headroom.play_policies(sim, searched.policies("adaptive", run.rows, sim), *run.arrays).reward
        d = b - a
        print(f"  seed {seed}: teacher share enumerated {(a.mean() - best_fixed) / (adaptive - best_fixed):.3f}, "
              f"searched {(b.mean() - best_fixed) / (adaptive - best_fixed):.3f}; searched - enumerated "
              f"{d.mean():+.4f} (paired SE {d.std(ddof=1) / np.sqrt(len(d)):.4f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
