"""One agent alone on a real team's held-out tasks: the direct accuracy a team is measured against.

    python -m studies.single_agent --config configs/small_team.yaml --tasks 300
    python -m studies.single_agent --config configs/small_team.yaml --tasks 300 --agent 2 --json

Agent ``--agent`` of the config's LLM team (its role, persona, prompts, parsing and scorer) answers
each of the first ``--tasks`` held-out tasks once, with no teammates and no second round: the call
every topology's first round starts from. The held-out split is in a fixed shuffled order
(:class:`agents_llm.team.TaskPool`), so these are the tasks the team's held-out evaluation plays
first. Calls are kept in flight (``runtime.episodes_in_flight``, bounded by the backend's
``max_concurrency``) and cached like the team's.

Prints accuracy with its standard error, tokens per task (prompt and completion, from the server's
usage), and the same per subject and per difficulty bucket where the tasks name them; ``--json``
prints one JSON object instead, ``--out F`` also writes it to F.
"""
from __future__ import annotations

import asyncio
import dataclasses
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from agents_llm.scoring import score
from learners.config import load_experiment
from topo_env.engine.backend_registry import LLM_SERVER, backend_offers, make_backend, sibling_backend
from topo_env.engine.cli import OneLineParser, format_table, points, positive_int, run_main
from topo_env.engine.config_checks import ConfigError
from topo_env.engine.tasks import task_bucket
from topo_env.engine.team_backend import AgentCall
from topo_env.references.oracle import standard_error

PROG = "python -m studies.single_agent"
COLUMNS = ("group", "tasks", "accuracy (pts)", "SE (pts)", "tokens/task")


def build_parser() -> OneLineParser:
    parser = OneLineParser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", required=True, help="experiment YAML whose env is an LLM team")
    parser.add_argument("--tasks", required=True, type=positive_int, help="held-out tasks to answer")
    parser.add_argument("--agent", type=int, default=0, help="which agent of the team answers (default 0)")
    parser.add_argument("--seed", type=int, default=0, help="task k's call uses seed + k (default 0)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="config override")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    parser.add_argument("--out", default=None, help="also write the JSON object to this file")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    return parser


def summarize(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Accuracy, its SE and tokens per task of answered tasks (``correct``, ``tokens`` per row)."""
    correct = np.array([r["correct"] for r in rows], dtype=float)
    return {"tasks": len(rows), "accuracy": float(correct.mean()), "accuracy_se": standard_error(correct),
            "tokens_per_task": float(np.mean([r["tokens"] for r in rows]))}


def answer_alone(config_path: str, tasks: int, agent: int, seed: int = 0, sets: Sequence[str] = (),
                 progress: bool = True) -> dict[str, Any]:
    """Agent ``agent`` alone on held-out tasks ``0 .. tasks-1`` (module docstring): the summary
    over all of them, ``by_subject`` and ``by_bucket``, and one row per task (``task_id``,
    ``correct``, ``tokens``, ``answer``)."""
    cfg = load_experiment(config_path, list(sets))
    env = dataclasses.replace(cfg.env, split="eval")
    if not backend_offers(env.backend, LLM_SERVER):
        raise ConfigError(f"{config_path}: the single-agent study calls a real team; give a config with "
                          "an LLM backend (e.g. configs/small_team.yaml)")
    if not 0 <= agent < env.n_agents:
        raise ConfigError(f"--agent {agent}: the team has agents 0 .. {env.n_agents - 1}")
    team = make_backend(env)
    held_out = len(team.tasks.splits["eval"])
    if tasks > held_out:
        raise ConfigError(f"--tasks {tasks}: the held-out split holds {held_out} tasks; give at most that")
    in_flight = max(1, min(cfg.runtime.episodes_in_flight, env.backend.max_concurrency))
    teams = [team] + [sibling_backend(team, env) for _ in range(in_flight - 1)]
    bar = tqdm(total=tasks, desc=f"agent {agent} alone", disable=not progress, file=sys.stderr)

    async def worker(slot: int) -> list[dict[str, Any]]:
        rows, member = [], teams[slot]
        for k in range(slot, tasks, in_flight):
            task = member.task_at("eval", k)
            member.start_episode(task, np.random.default_rng(seed + k), env.n_agents, env.rounds)
            reply = await member.call_agent(AgentCall(agent, member.roles[agent], 0, "solo", task, (), None))
            rows.append({"index": k, "task_id": task.id, "subject": task.metadata.get("subject"),
                         "bucket": task_bucket(task), "answer": reply.answer,
                         "correct": score(task, reply.text), "tokens": reply.prompt_tokens + reply.completion_tokens})
            bar.update()
        return rows

    async def everyone() -> list[dict[str, Any]]:
        try:
            return [row for rows in await asyncio.gather(*(worker(s) for s in range(in_flight))) for row in rows]
        finally:
            await team.client.aclose()

    try:
        rows = sorted(asyncio.run(everyone()), key=lambda r: r["index"])
    finally:
        bar.close()
    groups = {}
    for key in ("subject", "bucket"):
        names = sorted({r[key] for r in rows if r[key] is not None}, key=str)
        groups[f"by_{key}"] = {str(name): summarize([r for r in rows if r[key] == name]) for name in names}
    return {"config": config_path, "agent": agent, "role": team.roles[agent], "persona": team.personas[agent],
            "model": env.backend.model, **summarize(rows), **groups, "rows": rows}


def print_tables(result: dict[str, Any]) -> None:
    def row(group: str, s: dict[str, Any]) -> dict[str, Any]:
        return {"group": group, "tasks": s["tasks"], "accuracy (pts)": points(s["accuracy"]),
                "SE (pts)": points(s["accuracy_se"]), "tokens/task": f"{s['tokens_per_task']:.1f}"}

    rows = [row("all", result)]
    rows += [row(f"subject {name}", s) for name, s in result["by_subject"].items()]
    rows += [row(f"bucket {name}", s) for name, s in result["by_bucket"].items()]
    print(f"Agent {result['agent']} ({result['role']}, {result['persona']}) of {result['model']} alone on "
          f"{result['tasks']} held-out tasks of {result['config']}:")
    print(format_table(rows, COLUMNS))
    print("SE: the standard error of the mean over tasks. tokens/task: prompt and completion tokens from the "
          "server's usage.")


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    result = answer_alone(args.config, args.tasks, args.agent, args.seed, args.set, progress=not args.no_progress)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=1))
    if args.json:
        print(json.dumps({k: v for k, v in result.items() if k != "rows"}))
    else:
        print_tables(result)
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main, PROG))
