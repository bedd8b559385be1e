"""How much of the headroom the teacher itself earns, and how precisely a run's held-out episodes measure a share.

Training's teacher (:mod:`learners.teacher`) plays the adaptive reference searched on what the task text tells,
each episode's policy chosen from its text (:mod:`topo_env.references.reading`). Played exactly as training plays
it, on each seed's held-out episodes (those a run of that seed is scored on), with both readings (``map``: the
most probable subject's policy; ``posterior``, the default: the highest expected reward under the reader's
posterior), its headroom share is the most a student that imitates it perfectly can earn. A third row plays
each episode's true subject's policy (``known subject``): what misreading costs the ``map`` teacher. The share's standard
error comes from the per-episode differences (delta method: share = mean(t - b) / mean(a - b)).

    python -m experiments.teacher_ceiling --seeds 0 1 2
"""
from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from learners.config import load_experiment
from topo_env.engine.seeding import held_out_seed
from topo_env.frontends.env_config import EnvConfig
from topo_env.frontends.vector_env import SimVectorEnv
from topo_env.references import headroom
from topo_env.references.reading import READINGS, cached_posterior_policy
from topo_env.sim.tasks import TextReader

KNOWN = "known subject"
ROWS = (*READINGS, KNOWN)


def share_with_se(policy: np.ndarray, best_fixed: np.ndarray, adaptive: np.ndarray) -> tuple[float, float]:
    """(share, SE) of per-episode rewards (B,) each: mean(policy - best_fixed) / mean(adaptive - best_fixed),
    its standard error by the delta method over the B paired episodes."""
    gain, gap = policy - best_fixed, adaptive - best_fixed
    share = gain.mean() / gap.mean()
    influence = (gain - share * gap) / gap.mean()
    return float(share), float(influence.std(ddof=1) / np.sqrt(len(gain)))


class HeldOut(NamedTuple):
    """A run's held-out episodes for the batch simulator: ``arrays`` (tasks, noise, adversaries), the
    headroom references' per-episode rewards (``best_fixed``, ``adaptive``), each episode's posteriors
    over subject and difficulty bucket as training's teacher reads them (``posteriors``) and
    ``subject_read`` (the share whose most probable subject is the true one)."""
    arrays: tuple
    best_fixed: np.ndarray
    adaptive: np.ndarray
    posteriors: tuple[np.ndarray, np.ndarray]
    subjects: np.ndarray
    subject_read: float


def held_out(venv: SimVectorEnv, config: EnvConfig, seed: int, episodes: int) -> HeldOut:
    """The first ``episodes`` held-out episodes of a run of ``seed`` on ``venv``'s team (``config``'s)."""
    drawn, _ = venv.sample_episodes(range(held_out_seed(seed), held_out_seed(seed) + episodes), "eval")
    arrays = (drawn.tasks, drawn.noise, drawn.adversaries)
    played = headroom.play_references(venv.sim, headroom.cached_references(config, progress=False)[0], *arrays)
    posteriors = TextReader(venv.profile).posteriors(list(drawn.texts))
    return HeldOut(arrays, played["best_fixed"].reward, played["adaptive"].reward, posteriors, drawn.tasks.subject,
                   float((posteriors[0].argmax(axis=1) == drawn.tasks.subject).mean()))


def ceiling(config: str, overrides: Sequence[str], seed: int, episodes: int) -> dict:
    """The teacher's figures on the ``episodes`` held-out episodes of a run of ``seed``."""
    cfg = load_experiment(config, overrides)
    venv = SimVectorEnv(cfg.env)
    episodes_of_run = held_out(venv, cfg.env, seed, episodes)
    teacher, _ = cached_posterior_policy(cfg.env, progress=False)
    best_fixed, adaptive = episodes_of_run.best_fixed, episodes_of_run.adaptive
    row = {"seed": seed, "best_fixed": float(best_fixed.mean()), "adaptive": float(adaptive.mean()),
           "subject_read": episodes_of_run.subject_read}
    known = teacher.candidates[teacher.subject_candidate[episodes_of_run.subjects]]
    for reading in ROWS:
        policies = known if reading == KNOWN else teacher.policies(*episodes_of_run.posteriors, reading=reading)
        rewards = headroom.play_policies(venv.sim, policies, *episodes_of_run.arrays).reward
        share, se = share_with_se(rewards, best_fixed, adaptive)
        row[reading] = {"teacher": float(rewards.mean()), "share": share, "share_se": se}
    return row


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m experiments.teacher_ceiling", description=__doc__.split("\n\n")[0])
    p.add_argument("--config", default="configs/default.yaml")
    p.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--episodes", type=int, default=20000, help="held-out episodes per seed (a run's train.eval_episodes)")
    args = p.parse_args(argv)
    rows = [ceiling(args.config, args.set, s, args.episodes) for s in args.seeds]
    print("seed  best_fixed  adaptive  reading        teacher  teacher share (SE)  subject read right")
    for r in rows:
        for reading in ROWS:
            print(f"{r['seed']:>4}  {r['best_fixed']:.4f}      {r['adaptive']:.4f}    {reading:<13}  "
                  f"{r[reading]['teacher']:.4f}   {r[reading]['share']:+.2f} ({r[reading]['share_se']:.2f})"
                  f"        {r['subject_read']:.3f}")
    for reading in ROWS:
        shares = np.array([r[reading]["share"] for r in rows])
        if len(shares) > 1:
            print(f"{reading}: mean teacher share {shares.mean():+.2f} "
                  f"(SE over seeds {shares.std(ddof=1) / np.sqrt(len(shares)):.2f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
