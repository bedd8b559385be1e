"""A finished sim-to-real run's controller and every fixed topology, replayed on the real team under
another decision (issue 48, part 5: the team measured with the LLM decision node and with a vote).

The decision only reads the agents' final outputs: under ``env.decision=vote`` (or ``agent:K``) every
agent call of an episode is the call the run's own evaluation made (same held-out task, same
observations, so the same greedy actions), and a backend with a response cache answers all of them
from it; only the decision changes (the vote makes no call). So the same 300 held-out tasks cost no
new agent call, and the table is paired with the run's own, task by task.

    python -m experiments.decision_swap runs/real300/llm --decision vote --out runs/real300/llm_vote.json \\
        [--set env.backend.cache_path=...]

replays the run's own evaluation too (from the cache), prints the held-out table under the new decision
beside the run's and writes ``--out`` (JSON: ``decision``, ``eval``, ``qmix_minus``, ``against_run``: per
policy the new decision minus the run's in accuracy, with its paired SE over the tasks).
"""
from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from learners.config import ExperimentConfig, with_overrides
from studies.sim2real import compare_on_real
from topo_env.engine.cli import format_table, points
from topo_env.engine.user_files import read_json_file, write_text_atomically


def swap(run: Path, decision: str, sets: Sequence[str] = (), progress: bool = True) -> dict:
    """The run's real team under its own decision and under ``env.decision=decision`` (both with
    ``sets``): its controller (``run/sim_run``, or ``run/finetune`` where it fine-tuned) and every fixed
    topology on its held-out tasks, and per policy the accuracy difference paired task by task."""
    summary = read_json_file(run / "results.json", "the run's results.json", "give a finished --sim2real run's --out",
                             ("config", "eval", "sim2real"))
    own = with_overrides(ExperimentConfig.from_dict(summary["config"]), list(sets))
    other = with_overrides(own, [f"env.decision={decision}"])
    s2r = summary["sim2real"]
    policy_run = Path(s2r["finetune"]["run"]) if s2r.get("finetune") else Path(s2r["sim_run"])
    before, before_traces, _, _, _ = compare_on_real(own, policy_run, progress)
    after, after_traces, _, paired, _ = compare_on_real(other, policy_run, progress)
    return {"decision": decision, "run_decision": own.env.decision, "run": str(run), "eval": after,
            "qmix_minus": paired, "against_run": against(before, before_traces, after, after_traces)}


def against(before: dict, before_traces: dict, after: dict, after_traces: dict) -> dict:
    """Per policy: accuracy under the new decision and the run's, and the difference with its SE paired
    over the same held-out tasks."""
    out = {}
    for name, traces in after_traces.items():
        d = np.array([a.accuracy for a in traces]) - np.array([b.accuracy for b in before_traces[name]])
        out[name] = {"before": before[name]["accuracy"], "after": after[name]["accuracy"], "difference": float(d.mean()),
                     "se": float(d.std(ddof=1) / np.sqrt(len(d)))}
    return out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m experiments.decision_swap", description=__doc__.split("\n\n")[0])
    p.add_argument("run", type=Path, help="a finished train_qmix.py --sim2real --out folder")
    p.add_argument("--decision", required=True, help="llm, vote or agent:K")
    p.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE")
    p.add_argument("--out", type=Path, required=True, help="JSON file to write")
    p.add_argument("--no-progress", action="store_true")
    args = p.parse_args(argv)
    result = swap(args.run, args.decision, args.set, progress=not args.no_progress)
    write_text_atomically(args.out, json.dumps(result, indent=2, default=str))
    rows = [{"policy": name, f"accuracy ({args.decision})": points(row["after"]), "run's decision": points(row["before"]),
             "difference (SE)": f"{100 * row['difference']:+.1f} ({100 * row['se']:.1f})",
             "tokens/task": f"{result['eval'][name].get('tokens_per_task', 0):.0f}",
             "qmix - policy (SE)": (f"{result['qmix_minus'][name]['mean']:+.4f} ({result['qmix_minus'][name]['se']:.4f})"
                                    if name in result["qmix_minus"] else "")}
            for name, row in result["against_run"].items()]
    print(format_table(rows, list(rows[0])))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
