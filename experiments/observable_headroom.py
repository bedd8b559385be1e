"""What adapting earns when the context comes from reading the task text, not from hidden variables.

The headroom reference (``python -m topo_env.references.oracle_cli --headroom``) knows each task's true subject
and difficulty bucket. A learned controller sees only the task text, whose cue words name the
subject and the bucket with the profile's fidelities (``topo_env/sim/tasks.py``). This study runs
the same search (:func:`topo_env.references.headroom.measure_headroom`) with the context a Bayes-optimal reader
of those cue words would infer (MAP subject, MAP bucket, and the adversary mask as before), so it
is an estimate of what a learner reading the text can reach at best with this policy class.

    python -m experiments.observable_headroom --profile mmlu_pro [--adversary random] [--json]
"""
from __future__ import annotations

import argparse
import json
from collections.abc import Sequence

import numpy as np

from topo_env.sim.profiles import profile_argument
from topo_env.references.headroom import format_headroom, hidden_context, measure_headroom
from topo_env.sim.batch import TaskArrays
from topo_env.sim.profiles import get_profile


def map_reading(true_class: np.ndarray, prior: np.ndarray, words: int, fidelity: float,
                rng: np.random.Generator) -> np.ndarray:
    """(B,) the MAP class a reader infers from ``words`` cue words, each naming the true class with
    probability ``fidelity`` and a uniformly random class otherwise (tasks.py's generative process;
    every word belongs to one class's vocabulary)."""
    b, k = len(true_class), len(prior)
    named = np.where(rng.random((b, words)) < fidelity, true_class[:, None], rng.integers(0, k, (b, words)))
    log_post = np.log(prior)[None, :].repeat(b, axis=0)
    for w in range(words):
        hit = named[:, w, None] == np.arange(k)[None, :]
        log_post += np.log(np.where(hit, fidelity + (1 - fidelity) / k, (1 - fidelity) / k))
    return log_post.argmax(axis=1)


def observed_context(profile_name_: str, seed: int):
    """A context function for measure_headroom: (MAP subject, MAP bucket, adversary mask)."""
    profile = get_profile(profile_name_)
    calls = iter(range(1_000_000))

    def context(tasks: TaskArrays, adversaries: np.ndarray) -> np.ndarray:
        rng = np.random.default_rng([seed, next(calls)])
        hidden = hidden_context(tasks, adversaries)
        subject_prior = np.asarray(profile.subject_probs)
        bucket_prior = np.bincount(tasks.bucket, minlength=3) / len(tasks.bucket) + 1e-9
        subject = map_reading(tasks.subject, subject_prior, profile.subject_cue_words,
                              profile.subject_cue_fidelity, rng)
        bucket = map_reading(tasks.bucket, bucket_prior, profile.difficulty_cue_words,
                             profile.difficulty_cue_fidelity, rng)
        print(f"reader: subject right {np.mean(subject == tasks.subject):.3f}, "
              f"bucket right {np.mean(bucket == tasks.bucket):.3f}")
        return np.stack([subject, bucket, hidden[:, 2]], axis=1).astype(np.int64)

    return context


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--profile", type=profile_argument, default="mmlu_pro")
    p.add_argument("--adversary", choices=("none", "random"), default="none")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-bucket", action="store_true", help="context: MAP subject and adversaries only")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    context = observed_context(args.profile, args.seed)
    if args.no_bucket:
        full = context

        def context(tasks, adversaries):  # noqa: E306
            c = full(tasks, adversaries)
            c[:, 1] = 0
            return c
    result = measure_headroom(args.profile, adversary=args.adversary, seed=args.seed, context=context)
    print(json.dumps(result, indent=1) if args.json else format_headroom(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
