"""From a fitted simulated team to a "real" one: what pretraining on the fitted team is worth.

Issue 27, section 3, on the simulated team (no LLM is called):

1. traces of the simulated MMLU-Pro team playing random joint actions on a pool of tasks (as a probe
   of a real team would record them) are fitted by ``topo_env.fitting.fit``: ``OUT/fitted.yaml``;
2. a perturbed copy stands in for the real team the fit was meant to describe (``OUT/real.yaml``:
   ability -0.2 logits, the pull of a shown trap x 1.3, every subject's offset and verifiability
   moved by N(0, 0.3));
3. QMIX is pretrained on the fitted team (:func:`learners.seeds.run_seeds`, the default config), then, per
   seed, on the "real" team: continued for E episodes from the pretrained networks (``init_from``),
   trained for E episodes from scratch, and the pretrained policy evaluated unchanged (one
   exploration episode with no update). Every arm is scored on the same 20,000 held-out episodes of
   the real team, with its headroom references.

    python -m experiments.transfer --out runs/transfer [--episodes 200] [--seeds 0 1 2]
"""
from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

import topo_env
from learners.config import DEFAULT_CONFIG, ExperimentConfig, load_experiment
from learners.seeds import mean_and_se, run_seeds
from learners.child import train_in_child
from learners.training import RunOptions
from topo_env.fitting.explore import record_exploration
from topo_env.fitting.fit import fit_profile, load_traces, write_profile
from topo_env.sim.profiles import get_profile, with_overrides

QUIET = RunOptions(progress=False, pictures=False)


def record_traces(path: Path, profile: str, episodes: int, seed: int, pool: int | None, rounds: int = 2) -> dict:
    """Episodes of uniform random joint actions on a pool of ``pool`` train tasks (None: the recorder's
    default) by the simulated team of ``profile``, recorded by
    :func:`topo_env.fitting.explore.record_exploration`, the sim-to-real route's recorder."""
    env = topo_env.parallel_env(profile=profile, rounds=rounds)
    try:
        return record_exploration(env, path, episodes, seed, pool)
    finally:
        env.close()


def perturbed(profile, seed: int):
    """The stand-in for the real team: the fitted team moved as the module docstring says."""
    rng = np.random.default_rng(seed)
    subjects = tuple((name, weight, float(offset + rng.normal(0, 0.3)), float(np.clip(v + rng.normal(0, 0.3), -1, 1)))
                     for name, weight, offset, v in profile.subjects)
    return with_overrides(profile, alpha=profile.alpha - 0.2, theta=profile.theta * 1.3, subjects=subjects,
                          name=f"{profile.name}-real")


def on_team(cfg: ExperimentConfig, profile: Path, seed: int | None = None, episodes: int | None = None,
            **train_keys) -> ExperimentConfig:
    """``cfg`` on the simulated team of ``profile``, with ``seed``, ``episodes`` and other ``train`` keys."""
    keys = {**train_keys, **({"seed": seed} if seed is not None else {}), **({"episodes": episodes} if episodes else {})}
    env = dataclasses.replace(cfg.env, backend=dataclasses.replace(cfg.env.backend, profile=str(profile)))
    return dataclasses.replace(cfg, env=env, train=dataclasses.replace(cfg.train, **keys))


def train(job: tuple[ExperimentConfig, Path, RunOptions]) -> None:
    cfg, out, options = job
    out.mkdir(parents=True, exist_ok=True)
    if train_in_child(cfg, out, options, log=out / "train.log") != 0:
        raise SystemExit(f"training into {out} failed: see {out / 'train.log'}")


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="runs/transfer")
    p.add_argument("--episodes", type=int, default=200, help="episodes on the real team (continued and scratch)")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--trace-episodes", type=int, default=3000)
    p.add_argument("--jobs", type=int, default=2)
    args = p.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    fitted_path, real_path = out / "fitted.yaml", out / "real.yaml"
    if not fitted_path.is_file():
        traces = out / "traces.jsonl"
        traces.unlink(missing_ok=True)
        record_traces(traces, "mmlu_pro", args.trace_episodes, seed=0, pool=1000)
        profile, _ = fit_profile(load_traces([traces]), get_profile("mmlu_pro"))
        write_profile(profile, fitted_path)
        write_profile(perturbed(get_profile(str(fitted_path)), seed=0), real_path)
    pretrained, default = out / "pretrained", load_experiment(DEFAULT_CONFIG)
    run_seeds(on_team(default, fitted_path), args.seeds, pretrained, args.jobs, QUIET)  # keeps finished seeds
    jobs = []
    for s in args.seeds:
        init = dataclasses.replace(QUIET, init_from=pretrained / f"seed{s}")
        jobs += [(on_team(default, real_path, s, args.episodes), out / f"continued/seed{s}", init),
                 (on_team(default, real_path, s, args.episodes), out / f"scratch/seed{s}", QUIET),
                 (on_team(default, real_path, s, 1, warmup_episodes=1_000_000), out / f"unchanged/seed{s}", init)]
    with ThreadPoolExecutor(args.jobs) as pool:
        list(pool.map(train, [job for job in jobs if not (job[1] / "results.json").is_file()]))
    table = {}
    for arm in ("unchanged", "continued", "scratch"):
        results = [json.loads((out / arm / f"seed{s}" / "results.json").read_text()) for s in args.seeds]
        table[arm] = {"reward": mean_and_se([r["eval"]["qmix"]["reward"] for r in results]),
                      "headroom_share": mean_and_se([r["eval"]["headroom_share"] for r in results]),
                      "qmix_minus_best_fixed": mean_and_se([r["qmix_minus"]["best_fixed"]["mean"] for r in results])}
    best_fixed = json.loads((out / "scratch/seed0/results.json").read_text())["eval"]["best_fixed"]["reward"]
    (out / "transfer.json").write_text(json.dumps({"episodes": args.episodes, "seeds": args.seeds, "arms": table,
                                                   "best_fixed": best_fixed}, indent=2))
    print(f"real team (perturbed fitted MMLU-Pro), {args.episodes} episodes on it, seeds {args.seeds}, "
          f"20,000 held-out episodes; best_fixed {best_fixed:.4f}")
    print(f"{'arm':<12}{'reward':>20}{'QMIX - best_fixed':>22}{'headroom share':>20}")
    for arm, row in table.items():
        print(f"{arm:<12}{row['reward']['mean']:>12.4f} ({row['reward']['se']:.4f})"
              f"{row['qmix_minus_best_fixed']['mean']:>+14.4f} ({row['qmix_minus_best_fixed']['se']:.4f})"
              f"{row['headroom_share']['mean']:>12.2f} ({row['headroom_share']['se']:.2f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
