"""Open-loop oracle yardsticks: exhaustive search over joint action sequences (N=3, T<=2).

Every one of the 6^(N*T) open-loop sequences (one joint action per round, the same for
every task) is scored with :class:`~topo_env.sim.batch.BatchSimulator` on the same M
sampled tasks and noise (common random numbers). Two yardsticks come out:

* ``fixed``: the single sequence with the best mean reward over the whole profile;
* ``bucket``: for each difficulty bucket (0 easy, 1 medium, 2 hard) the sequence that is
  best on that bucket's tasks; its reward is the bucket-share-weighted mean of the
  per-bucket rewards (an oracle that knows each task's difficulty bucket).

Selection in two stages, to tame the noise of comparing 46,656 sequences whose rewards
differ by hundredths: all sequences are scored on M samples (stream "train"); the best
``shortlist`` sequences overall and per bucket, and the fixed baselines, are re-scored on R fresh samples (stream
"rerank"; the CLI uses R = 20,000) and the winners picked there. To avoid the winner's
curse the chosen sequences are then scored on E more fresh samples (stream "eval", E =
20,000 in the CLI), and those are the reported rewards (``reward_selection``: the
re-ranking score). The fixed baselines are scored on the same sample sets.

Efficiency: round 0 is run once per *distinct* first-round graph (joint actions that
give the same graph and the same verifier calls are the same round for the simulator);
each resulting state is replicated over the second-round joint actions, again keeping
only those giving distinct graphs per episode, and round 1 + the decision run in one
vectorised call per chunk. The results are exact: the simulator sees a joint action only
through its graph and its ``execute_verify`` agents.

CLI (:mod:`topo_env.references.oracle_cli`): ``python -m topo_env.references.oracle_cli --profile mmlu_pro --rounds 2 [--samples M] [--seed S]
[--adversarial i] [--json]``. With ``--headroom [--adversary random] [--episodes E]`` it measures
instead what a privileged adaptive controller gains over the best fixed sequence
(:mod:`topo_env.references.headroom`, built on :func:`sequence_group_sums`).
"""
from __future__ import annotations

import itertools
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from tqdm import tqdm

from topo_env.frontends.comm_actions import ACTION_NAMES, N_ACTIONS
from topo_env.references.baselines import FIXED_BASELINES, open_loop_actions
from topo_env.engine.cli import format_table
from topo_env.sim.batch import BatchRoundSpec, BatchState, TaskArrays
from topo_env.frontends.comm_batch import CommBatchSimulator, comm_round_specs
from topo_env.sim.model import EpisodeNoise
from topo_env.engine.seeding import oracle_rng
from topo_env.sim.profiles import get_profile
from topo_env.frontends.targets import choose_targets
from topo_env.engine.tasks import DIFFICULTY_BUCKETS

ORACLE_AGENTS = 3
MAX_ROUNDS = 2
DEFAULT_SAMPLES = 1000
DEFAULT_SHORTLIST = 64
DEFAULT_LARGE_SAMPLES = 20000
DEFAULT_HEADROOM_SAMPLES = 4000
"""``--headroom``'s default M: the adaptive reference splits the episodes by context and round-1 outcome."""
DEFAULT_CONTEXT_SHORTLIST = 8
DEFAULT_CHUNK_ROWS = 60_000
"""Episodes simulated per vectorised call (bounds memory: about 2 KB of noise per episode)."""


def joint_actions(n_agents: int = ORACLE_AGENTS) -> np.ndarray:
    """All 6^N joint actions, (6^N, N); row k is the base-6 digits of k (agent 0 most significant)."""
    return np.array(list(itertools.product(range(N_ACTIONS), repeat=n_agents)), dtype=np.int64)


def sequence_actions(index: int, rounds: int, n_agents: int = ORACLE_AGENTS) -> np.ndarray:
    """The (T, N) action array of sequence ``index`` (round 0's joint action most significant)."""
    table = joint_actions(n_agents)
    digits = []
    for _ in range(rounds):
        index, k = divmod(int(index), len(table))
        digits.append(k)
    return table[digits[::-1]]


def sequence_index(actions: np.ndarray) -> int:
    """Inverse of :func:`sequence_actions`: the index of a (T, N) action array."""
    index = 0
    for row in np.asarray(actions):
        for a in row:
            index = index * N_ACTIONS + int(a)
    return index


def sequence_names(actions: np.ndarray) -> list[list[str]]:
    """[[action name per agent] per round] of a (T, N) action array."""
    return [[ACTION_NAMES[int(a)] for a in row] for row in np.asarray(actions)]


def actions_from_names(names: Sequence[Sequence[str]]) -> np.ndarray:
    """Inverse of :func:`sequence_names`: the (T, N) action array of [[name per agent] per round]
    (as results.json stores the oracles' sequences). A ValueError names an unknown action."""
    unknown = sorted({a for row in names for a in row} - set(ACTION_NAMES))
    if unknown:
        raise ValueError(f"unknown action name(s) {unknown}: expected one of {list(ACTION_NAMES)}")
    return np.array([[ACTION_NAMES.index(a) for a in row] for row in names], dtype=np.int64)


def sample_episodes(sim: CommBatchSimulator, samples: int, seed: int,
                  split: str) -> tuple[TaskArrays, EpisodeNoise, np.ndarray]:
    """The M tasks, noise and (M, N) adversary masks (:meth:`CommBatchSimulator.sample_adversaries`) the
    oracle uses for ``split`` ("train": selection, "rerank": re-ranking, "eval": held-out), drawn in
    that order from :func:`topo_env.engine.seeding.oracle_rng`: the sample sets are independent, and the same
    (seed, split) always gives the same samples."""
    rng = oracle_rng(seed, split)
    tasks, noise = sim.sample(rng, int(samples))
    return tasks, noise, sim.sample_adversaries(rng, int(samples))


def draw_samples(sim: CommBatchSimulator, samples: int, seed: int, split: str) -> tuple[TaskArrays, EpisodeNoise]:
    """The tasks and noise of :func:`sample_episodes` (without the adversary masks)."""
    tasks, noise, _ = sample_episodes(sim, samples, seed, split)
    return tasks, noise


def spec_keys(sim: CommBatchSimulator, spec: BatchRoundSpec) -> np.ndarray:
    """An int64 per episode identifying what the simulator does with its round: the graph, who is
    active, and, if the profile has a verifier, who is verified (rounds with equal keys are the
    same round for the simulator)."""
    n = spec.adjacency.shape[1]
    weights = (1 << np.arange(n * n, dtype=np.int64)).reshape(n, n)
    key = (spec.adjacency.astype(np.int64) * weights).sum(axis=(1, 2))
    bits = 1 << np.arange(n, dtype=np.int64)
    key = (key << n) | (spec.active.astype(np.int64) * bits).sum(axis=1)
    if sim.profile.verifier is not None:
        key = (key << n) | (spec.verify.astype(np.int64) * bits).sum(axis=1)
    return key


def round_keys(sim: CommBatchSimulator, actions: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """:func:`spec_keys` of the rounds (B, N) joint actions make with these targets."""
    return spec_keys(sim, comm_round_specs(actions, np.ascontiguousarray(targets, dtype=np.int64)))


def standard_error(values: np.ndarray) -> float:
    """Standard error of the mean of ``values`` (0 for fewer than two)."""
    return float(values.std(ddof=1) / np.sqrt(len(values))) if len(values) > 1 else 0.0


def score_round_specs(sim: CommBatchSimulator, rounds: Sequence[BatchRoundSpec], seed: int = 0,
                      split: str = "eval") -> dict[str, float]:
    """Any controller's graphs scored at batch speed on the oracle's samples: ``rounds`` holds one
    :class:`~topo_env.sim.batch.BatchRoundSpec` per round for the B episodes of
    ``draw_samples(sim, B, seed, split)`` (the same tasks and noise the oracle's yardsticks are
    scored on with that seed and split). Returns mean reward, its standard error, accuracy and
    tokens per task."""
    if not rounds:
        raise ValueError("score_round_specs needs at least one round")
    b = rounds[0].adjacency.shape[0]
    tasks, noise = draw_samples(sim, b, seed, split)
    res = sim.run_specs(list(rounds), tasks, noise)
    return {"reward": float(res.reward.mean()), "reward_se": standard_error(res.reward),
            "accuracy": float(res.accuracy.mean()), "tokens_per_task": float(res.tokens.mean()), "episodes": int(b)}


def score_sequences(sim: CommBatchSimulator, tasks: TaskArrays, noise: EpisodeNoise, progress: bool = True,
                    chunk_rows: int = DEFAULT_CHUNK_ROWS) -> np.ndarray:
    """Summed reward of every open-loop sequence on every difficulty bucket.

    Returns:
        (6^(N*T), 3) float64: ``sums[s, b]`` is the total reward of sequence s (index as in
        :func:`sequence_actions`) over the sample episodes of bucket b. The mean reward of s
        is ``sums[s].sum() / M``.
    """
    sums, _ = sequence_group_sums(sim, tasks, noise, lambda state: tasks.bucket, len(DIFFICULTY_BUCKETS),
                                  progress=progress, chunk_rows=chunk_rows)
    return sums.reshape(-1, len(DIFFICULTY_BUCKETS))


def sequence_group_sums(sim: CommBatchSimulator, tasks: TaskArrays, noise: EpisodeNoise,
                        group_of: Callable[[BatchState], np.ndarray], n_groups: int,
                        adversaries: np.ndarray | None = None, progress: bool = True,
                        chunk_rows: int = DEFAULT_CHUNK_ROWS) -> tuple[np.ndarray, np.ndarray]:
    """Summed reward of every open-loop sequence on every group of episodes, where an episode's group
    may depend on what its first round did.

    ``group_of(state)`` gets the :class:`~topo_env.sim.batch.BatchState` of the M episodes after a
    first round and returns their (M,) group ids in ``[0, n_groups)``; ``adversaries`` is the (M, N)
    mask of :meth:`CommBatchSimulator.initial_state` (None: the fixed placement).

    Returns:
        ``sums`` (6^N, 6^N or 1, G) float64: ``sums[j, k, g]`` is the total reward of the sequence with
        first-round joint action j and second-round joint action k (index as in :func:`joint_actions`)
        over the episodes that fall in group g after first round j; ``counts`` (6^N, G) int64: how
        many episodes fall in group g after first round j.
    """
    n, rounds = sim.n, sim.rounds
    if rounds > MAX_ROUNDS:
        raise ValueError(f"rounds={rounds}: the oracle searches at most {MAX_ROUNDS} rounds")
    table = joint_actions(n)
    n_joint = len(table)
    m = len(tasks.difficulty)
    ring = np.broadcast_to(choose_targets(sim.target_rule, None, None, n)[0], (n_joint, n))
    first_keys = round_keys(sim, table, ring)
    _, first_reps, first_inverse = np.unique(first_keys, return_index=True, return_inverse=True)
    rep_sums = np.zeros((len(first_reps), n_joint ** (rounds - 1), n_groups))
    rep_counts = np.zeros((len(first_reps), n_groups), dtype=np.int64)
    bar = tqdm(total=len(first_reps), desc=f"oracle {sim.profile.name} T={rounds}", disable=not progress,
               file=sys.stderr, unit="first-round graph")
    with bar:
        for r, first in enumerate(first_reps):
            state = sim.run_round(sim.initial_state(m, adversaries), np.broadcast_to(table[first], (m, n)).copy(),
                                  tasks, noise)
            groups = np.asarray(group_of(state), dtype=np.int64)
            onehot = (groups[:, None] == np.arange(n_groups)[None, :]).astype(np.float64)  # (M, G)
            rep_counts[r] = np.bincount(groups, minlength=n_groups)
            if rounds == 1:
                rep_sums[r, 0] = onehot.T @ sim.finish(state, tasks, noise).reward
            else:
                rep_sums[r] = _second_round_sums(sim, state, tasks, noise, table, onehot, chunk_rows).T
            bar.update(1)
    inverse = first_inverse.reshape(-1)
    return rep_sums[inverse], rep_counts[inverse]


def _second_round_sums(sim: CommBatchSimulator, state: BatchState, tasks: TaskArrays, noise: EpisodeNoise,
                       table: np.ndarray, onehot: np.ndarray, chunk_rows: int) -> np.ndarray:
    """(G, 6^N) group reward sums of every second-round joint action after ``state``."""
    n, n_joint = sim.n, len(table)
    m = state.tokens.shape[0]
    targets = choose_targets(sim.target_rule, state.previous.label, state.previous.conf, n)  # (M, N)
    out = np.zeros((onehot.shape[1], n_joint))
    episodes_per_chunk = max(1, chunk_rows // n_joint)
    for start in range(0, m, episodes_per_chunk):
        ep = np.arange(start, min(m, start + episodes_per_chunk))
        pair_ep = np.repeat(ep, n_joint)
        pair_act = np.tile(np.arange(n_joint), len(ep))
        keys = round_keys(sim, table[pair_act], targets[pair_ep])
        # distinct (episode, round graph) pairs; keys fit in 9 + 3 bits
        _, reps, inverse = np.unique(pair_ep.astype(np.int64) << 16 | keys, return_index=True, return_inverse=True)
        rows, acts = pair_ep[reps], pair_act[reps]
        sub_tasks = tasks.take(rows)
        sub_noise = noise.take(rows)
        after = sim.run_round(state.take(rows), table[acts], sub_tasks, sub_noise)
        reward = sim.finish(after, sub_tasks, sub_noise).reward[inverse.reshape(-1)].reshape(len(ep), n_joint)
        out += onehot[ep].T @ reward
    return out


def sequence_rewards(sim: CommBatchSimulator, indices: Sequence[int], tasks: TaskArrays, noise: EpisodeNoise,
                     adversaries: np.ndarray | None = None) -> np.ndarray:
    """(len(indices), M) per-episode reward of each open-loop sequence ``indices[i]`` on these episodes."""
    return np.stack([sim.run(sequence_actions(k, sim.rounds, sim.n), tasks, noise, adversaries).reward
                     for k in indices]) if len(indices) else np.zeros((0, len(tasks.difficulty)))


def baseline_indices(sim: CommBatchSimulator) -> np.ndarray:
    """The sequence indices of the fixed baselines (:data:`topo_env.references.baselines.FIXED_BASELINES`)."""
    return np.array([sequence_index(open_loop_actions(name, sim.n, sim.rounds, sim.roles)) for name in FIXED_BASELINES])


def check_setting(n_agents: int, rounds: int) -> None:
    """ValueError naming ``n_agents`` or ``rounds`` unless the exhaustive search supports them."""
    if n_agents != ORACLE_AGENTS:
        raise ValueError(f"n_agents={n_agents!r}: the exhaustive oracle supports only N={ORACLE_AGENTS} "
                         f"(6^(N*T) sequences)")
    if isinstance(rounds, bool) or not isinstance(rounds, (int, np.integer)) or not 1 <= rounds <= MAX_ROUNDS:
        raise ValueError(f"rounds={rounds!r}: the exhaustive oracle supports rounds 1 or {MAX_ROUNDS} "
                         f"(6^(3*T) sequences)")


def search(profile_name: str, rounds: int = 2, samples: int = DEFAULT_SAMPLES, seed: int = 0,
           adversarial_agents: Sequence[int] = (), target_rule: str = "disagree", w_acc: float = 1.25,
           w_tok: float = 0.1, max_tokens: int = 10000, progress: bool = True, n_agents: int = ORACLE_AGENTS,
           chunk_rows: int = DEFAULT_CHUNK_ROWS, shortlist: int = DEFAULT_SHORTLIST,
           rerank_samples: int | None = None, eval_samples: int | None = None) -> dict[str, Any]:
    """Find the best open-loop sequences: score all on ``samples`` episodes, re-rank the best
    ``shortlist`` (overall and per bucket) on ``rerank_samples`` fresh episodes (default
    4 * samples), report the winners on ``eval_samples`` more (default 4 * samples).

    Returns a dict of plain Python values:
        ``fixed``: {"reward" (eval samples), "reward_selection", "accuracy", "tokens_per_task",
        "sequence": [[action names per agent] per round]};
        ``bucket``: {"reward" (eval), "reward_selection", "buckets": {"easy" | "medium" | "hard":
        {"share" (eval share), "share_selection", "reward" (eval, mean over the bucket's
        tasks), "reward_selection", "sequence"}}};
        ``baselines``: {name: {"reward", "reward_selection"}} for the fixed baselines;
        ``profile``, ``rounds``, ``samples``, ``seed``, ``adversarial_agents``, ``sequences``, ``seconds``.

    Raises ValueError for N != 3, rounds outside 1..2, samples < 1 or a bad profile/setting.
    """
    check_setting(n_agents, rounds)
    if isinstance(samples, bool) or not isinstance(samples, (int, np.integer)) or samples < 1:
        raise ValueError(f"samples={samples!r}: must be an integer >= 1")
    if isinstance(shortlist, bool) or not isinstance(shortlist, (int, np.integer)) or shortlist < 1:
        raise ValueError(f"shortlist={shortlist!r}: must be an integer >= 1")
    started = time.perf_counter()
    sim = CommBatchSimulator(get_profile(profile_name), n_agents, int(rounds), adversarial_agents=tuple(adversarial_agents),
                         target_rule=target_rule, w_acc=w_acc, w_tok=w_tok, max_tokens=max_tokens)
    sel_tasks, sel_noise = draw_samples(sim, samples, seed, "train")
    sums = score_sequences(sim, sel_tasks, sel_noise, progress=progress, chunk_rows=chunk_rows)
    m = int(samples)

    # Stage 2: re-rank the shortlists on 4 M fresh samples.
    totals = sums.sum(axis=1)
    short_fixed = np.argsort(-totals, kind="stable")[:shortlist]
    short_bucket = [np.argsort(-sums[:, b], kind="stable")[:shortlist] for b in range(len(DIFFICULTY_BUCKETS))]
    # the fixed baselines always compete, so the oracle is never beaten by one on re-ranking
    baselines_k = baseline_indices(sim)
    short_fixed = np.unique(np.concatenate([short_fixed, baselines_k]))
    short_bucket = [np.unique(np.concatenate([s, baselines_k])) for s in short_bucket]
    candidates = np.unique(np.concatenate([short_fixed, *short_bucket])).tolist()
    m_rerank = 4 * m if rerank_samples is None else int(rerank_samples)
    m_eval = 4 * m if eval_samples is None else int(eval_samples)
    rr_tasks, rr_noise = draw_samples(sim, m_rerank, seed, "rerank")
    rr_bucket = rr_tasks.bucket
    rr_counts = np.bincount(rr_bucket, minlength=len(DIFFICULTY_BUCKETS))
    rr_sums = {k: np.bincount(rr_bucket, weights=reward, minlength=len(DIFFICULTY_BUCKETS))
               for k, reward in zip(candidates, sequence_rewards(sim, candidates, rr_tasks, rr_noise))}
    fixed_index = max(short_fixed.tolist(), key=lambda k: rr_sums[k].sum())
    fixed_actions = sequence_actions(fixed_index, rounds, n_agents)
    bucket_indices = [max(short_bucket[b].tolist(), key=lambda k: rr_sums[k][b]) if rr_counts[b] else fixed_index
                      for b in range(len(DIFFICULTY_BUCKETS))]
    bucket_actions = np.stack([sequence_actions(k, rounds, n_agents) for k in bucket_indices])  # (3, T, N)

    ev_tasks, ev_noise = draw_samples(sim, m_eval, seed, "eval")
    ev_bucket = ev_tasks.bucket
    fixed_result = sim.run(fixed_actions, ev_tasks, ev_noise)
    bucket_result = sim.run(bucket_actions[ev_bucket], ev_tasks, ev_noise)

    buckets = {}
    for b, label in enumerate(DIFFICULTY_BUCKETS):
        in_bucket = ev_bucket == b
        buckets[label] = {
            "share": float(in_bucket.mean()),
            "share_selection": float(rr_counts[b] / m_rerank),
            "reward": float(bucket_result.reward[in_bucket].mean()) if in_bucket.any() else None,
            "reward_selection": float(rr_sums[bucket_indices[b]][b] / rr_counts[b]) if rr_counts[b] else None,
            "sequence": sequence_names(bucket_actions[b]),
        }
    baselines = {}
    for name in FIXED_BASELINES:
        acts = open_loop_actions(name, n_agents, rounds, sim.roles)
        baselines[name] = {"reward": float(sim.run(acts, ev_tasks, ev_noise).reward.mean()),
                           "reward_selection": float(sim.run(acts, rr_tasks, rr_noise).reward.mean())}
    return {
        "profile": profile_name,
        "rounds": int(rounds),
        "samples": m,
        "rerank_samples": m_rerank,
        "eval_samples": m_eval,
        "seed": int(seed),
        "adversarial_agents": [int(i) for i in adversarial_agents],
        "sequences": int(len(sums)),
        "fixed": {
            "reward": float(fixed_result.reward.mean()),
            "reward_selection": float(rr_sums[fixed_index].sum() / m_rerank),
            "accuracy": float(fixed_result.accuracy.mean()),
            "tokens_per_task": float(fixed_result.tokens.mean()),
            "sequence": sequence_names(fixed_actions),
        },
        "bucket": {
            "reward": float(bucket_result.reward.mean()),
            "reward_selection": float(sum(rr_sums[k][b] for b, k in enumerate(bucket_indices)) / m_rerank),
            "accuracy": float(bucket_result.accuracy.mean()),
            "tokens_per_task": float(bucket_result.tokens.mean()),
            "buckets": buckets,
        },
        "baselines": baselines,
        "seconds": round(time.perf_counter() - started, 2),
    }


def format_report(result: dict[str, Any]) -> str:
    """A readable summary of :func:`search`'s result."""
    def seq(s: list[list[str]]) -> str:
        return " | ".join(", ".join(r) for r in s)

    lines = [f"oracle: profile={result['profile']} rounds={result['rounds']} samples={result['samples']} "
             f"seed={result['seed']} adversarial={result['adversarial_agents']} sequences={result['sequences']} "
             f"({result['seconds']:.1f} s)"]
    rows = [{"yardstick": "fixed oracle", "reward": result["fixed"]["reward"],
             "reward_selection": result["fixed"]["reward_selection"], "sequence": seq(result["fixed"]["sequence"])},
            {"yardstick": "bucket oracle", "reward": result["bucket"]["reward"],
             "reward_selection": result["bucket"]["reward_selection"], "sequence": ""}]
    for label, b in result["bucket"]["buckets"].items():
        rows.append({"yardstick": f"  {label} (share {b['share']:.2f})", "reward": b["reward"],
                     "reward_selection": b["reward_selection"], "sequence": seq(b["sequence"])})
    for name, b in result["baselines"].items():
        rows.append({"yardstick": f"baseline {name}", "reward": b["reward"],
                     "reward_selection": b["reward_selection"], "sequence": ""})
    lines.append(format_table(rows, ("yardstick", "reward", "reward_selection", "sequence")))
    lines.append(f"reward (Eq. 12, higher is better): the mean over {result['eval_samples']} fresh samples (stream "
                 f"'eval'); reward_selection: over the {result['rerank_samples']} re-ranking samples the winners were "
                 "picked on (biased upwards: the winner's curse)")
    return "\n".join(lines)
