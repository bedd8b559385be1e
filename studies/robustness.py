"""Robustness to injected adversarial agents (paper Section 5.3, Tables 2 and 3, Appendix E).

    python -m studies.robustness --checkpoint runs/adv --adversarial 1 --adversary-position random --episodes 1000
    python -m studies.robustness --config configs/default.yaml --adversarial 1 --adversary-position 0   # baselines only
    python -m studies.robustness --checkpoint runs/adv --backend llm --config configs/local_llm.yaml --episodes 20

Evaluates the learned QMIX policy (greedy, from a train_qmix.py checkpoint) and every baseline
on the same held-out episodes twice: clean (the run's env without adversaries) and attacked
(K agents replaced by adversaries, at fixed indices or placed at random per episode). Episode
k uses env seed ``held_out_seed(seed) + k`` (``seed``: the run's ``train.seed``;
:mod:`topo_env.engine.seeding`), as a training run's results.json, so the clean figures of a clean run equal its results.json. The
adversaries are drawn after the task and the noise, so the clean and attacked episode k share
its task and its noise: the paired difference is the adversary's effect alone.

Without --checkpoint only the baselines are evaluated, on the env of --config (default
configs/default.yaml). With it, the env is the checkpoint's; --config then only overrides
env keys (e.g. the llm settings for --backend llm), and --set applies last.

Prints Table 2 (accuracy clean, attacked, drop in points with its paired standard error),
Table 3 (total tokens over the episodes, and per task), and the Appendix E analysis (QMIX's
action distribution per round, clean vs attacked; the adversaries' out-degree under attack vs
the same agents' out-degree in the clean episodes, for every policy). Writes DIR/robustness.json
(``config``, ``attack``, ``clean`` / ``attacked``: per policy the keys of results.json's
entries, ``drop``, ``adversaries``) and PNG plots: robustness.png, and with a checkpoint
actions_qmix.png, topology_qmix_clean.png and topology_qmix_attacked.png.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from learners.config import DEFAULT_CONFIG, ExperimentConfig, load_experiment
from learners.evaluation import QMIXPolicy, agent_from_checkpoint, evaluate, load_checkpoint, paired_difference
from topo_env.frontends.inflight import sibling_envs
from learners.runner import space_dims
from topo_env.frontends.comm_actions import ACTION_NAMES
from topo_env.engine.backend_registry import backend_kinds
from topo_env.references.baselines import BASELINES, make_baseline
from topo_env.engine.cli import (OneLineParser, closing_note, fail, format_table, points, positive_int, run_main,
                          standard_error_note)
from topo_env.frontends.env_config import EnvConfig
from topo_env.engine.config_checks import ConfigError, load_yaml
from topo_env.frontends.parallel_env import TopologyParallelEnv
from topo_env.engine.seeding import EVAL_SEED_OFFSET, EVAL_SEED_STRIDE, held_out_seed

PROG = "python -m studies.robustness"


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog=PROG, description=__doc__.split("\n\n")[0],
                      epilog="Config keys: env in topo_env/frontends/env_config.py (EnvConfig), env.backend in topo_env/engine/backend_registry.py, "
                             "the other sections in learners/config.py.")
    p.add_argument("--checkpoint", metavar="PATH", help="train_qmix.py run directory or checkpoint.pt "
                   "(without it: baselines only)")
    p.add_argument("--config", help="YAML config: the env without --checkpoint (default: the repository's "
                   "configs/default.yaml); with it, env keys that override the checkpoint's")
    p.add_argument("--adversarial", type=positive_int, default=1, metavar="K",
                   help="adversarial agents injected in the attacked run (default 1)")
    p.add_argument("--adversary-position", default="random", metavar="i[,j..]|random",
                   help="'random' (default: K agents drawn per episode from its seed) or K comma-separated "
                        "agent indices (the same agents every episode)")
    p.add_argument("--backend", choices=backend_kinds(), help="use this backend kind; its keys come from --config "
                   "or --set env.backend.KEY=... (llm needs env.domain, env.backend.model and env.backend.dataset)")
    p.add_argument("--episodes", type=positive_int, help="held-out episodes per policy and condition "
                   "(default train.eval_episodes)")
    p.add_argument("--seed", type=int, help="run seed (default train.seed); episode k uses env seed "
                   f"{EVAL_SEED_OFFSET:,} + seed x {EVAL_SEED_STRIDE:,} + k")
    p.add_argument("--policies", help=f"comma-separated subset of qmix,{','.join(BASELINES)} (default all)")
    p.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="override a config key, nested keys with dots (env.backend.base_url=...)")
    p.add_argument("--out", metavar="DIR", help="output directory (default: the checkpoint's run directory, "
                   "else runs/robustness-<setting>)")
    p.add_argument("--no-plots", action="store_true", help="write no PNG plots")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--json", action="store_true", help="print robustness.json's object instead of the tables")
    return p


# -- configuration ------------------------------------------------------------------------


def load_setting(args: argparse.Namespace) -> tuple[ExperimentConfig, dict | None]:
    """The experiment config (checkpoint's or --config's, with overrides) and the checkpoint.
    ``--backend`` comes first, so the backend keys of --config and --set refine it."""
    kind = [] if args.backend is None else [f"env.backend={args.backend}"]
    if args.checkpoint is None:
        return load_experiment(args.config or DEFAULT_CONFIG, kind + list(args.set)), None
    env_keys = []
    if args.config is not None:
        data = load_yaml(args.config)
        section = data.get("env") or {}
        if not isinstance(section, dict):
            raise ConfigError(f"section 'env' of {args.config!r} must be a mapping")
        env_keys = [f"env.{k}={json.dumps(v)}" for k, v in section.items()]
    return load_checkpoint(args.checkpoint, kind + env_keys + list(args.set))


def parse_position(text: str, k: int, n_agents: int) -> str | tuple[int, ...]:
    """``"random"`` or a tuple of K agent indices from ``--adversary-position``; ValueError
    naming the bad value otherwise."""
    if not 1 <= k < n_agents:
        raise ValueError(f"--adversarial {k} with n_agents={n_agents} leaves no honest agent: K must be in "
                         f"1..{n_agents - 1}")
    if text == "random":
        return "random"
    try:
        indices = tuple(int(x) for x in text.split(","))
    except ValueError:
        raise ValueError(f"--adversary-position {text!r}: use 'random' or comma-separated agent indices") from None
    bad = [i for i in indices if not 0 <= i < n_agents]
    if bad:
        raise ValueError(f"--adversary-position {text!r}: agent index {bad[0]} is not in 0..{n_agents - 1}")
    if len(set(indices)) != len(indices):
        raise ValueError(f"--adversary-position {text!r} repeats an agent")
    if len(indices) != k:
        raise ValueError(f"--adversary-position {text!r} names {len(indices)} agent(s) but --adversarial is {k}")
    return tuple(sorted(indices))


def clean_env_config(env: EnvConfig) -> EnvConfig:
    """``env`` without adversaries, on the eval split."""
    return dataclasses.replace(env, adversarial_agents=(), adversary_position="fixed", n_adversaries=None, split="eval")


def attacked_env_config(env: EnvConfig, k: int, position: str | tuple[int, ...]) -> EnvConfig:
    """``env`` with K adversaries at ``position`` (``"random"`` or indices), on the eval split."""
    clean = clean_env_config(env)
    if position == "random":
        return dataclasses.replace(clean, adversary_position="random", n_adversaries=k)
    return dataclasses.replace(clean, adversarial_agents=tuple(position))


def policy_names(text: str | None, with_qmix: bool) -> list[str]:
    known = (["qmix"] if with_qmix else []) + list(BASELINES)
    if text is None:
        return known
    names = [x.strip() for x in text.split(",") if x.strip()]
    for name in names:
        if name == "qmix" and not with_qmix:
            raise ValueError("--policies qmix needs --checkpoint")
        if name not in known:
            raise ValueError(f"--policies: unknown policy {name!r}; known: {known}")
    if not names:
        raise ValueError(f"--policies {text!r} names no policy")
    return list(dict.fromkeys(names))


# -- evaluation ---------------------------------------------------------------------------


def run_study(args: argparse.Namespace, cfg: ExperimentConfig, checkpoint: dict | None, names: list[str],
        position: str | tuple[int, ...]) -> dict[str, Any]:
    """Evaluate every policy clean and attacked; the robustness.json object plus the traces."""
    torch.set_num_threads(cfg.runtime.torch_threads)
    episodes = args.episodes or cfg.train.eval_episodes
    seed = cfg.train.seed if args.seed is None else args.seed
    eval_seed = held_out_seed(seed)
    clean_env = TopologyParallelEnv(clean_env_config(cfg.env))
    attacked_env = TopologyParallelEnv(attacked_env_config(cfg.env, args.adversarial, position))
    # runtime.episodes_in_flight episodes at once against an LLM server (the same per-episode results)
    in_flight = cfg.runtime.episodes_in_flight
    clean_siblings, attacked_siblings = sibling_envs(clean_env, in_flight)[1:], sibling_envs(attacked_env, in_flight)[1:]
    progress = not args.no_progress
    clean, attacked, traces = {}, {}, {}
    try:
        for name in names:
            if name == "qmix":
                policy = QMIXPolicy(agent_from_checkpoint(checkpoint, cfg, space_dims(clean_env)[0]))
            else:
                policy = make_baseline(name)
            # attacked first: the clean run reports the same agents' out-degree, episode by episode
            attacked[name], hit = evaluate(attacked_env, policy, episodes, seed=eval_seed, progress=progress,
                                           siblings=attacked_siblings)
            clean[name], calm = evaluate(clean_env, policy, episodes, seed=eval_seed, progress=progress,
                                         watch=[t.adversaries for t in hit], siblings=clean_siblings)
            traces[name] = (calm, hit)
    finally:
        clean_env.close()
        attacked_env.close()
    first = traces[names[0]][1]
    per_episode = [list(t.adversaries) for t in first]
    counts = np.zeros(cfg.env.n_agents, dtype=np.int64)
    for adv in per_episode:
        counts[adv] += 1
    drop = {}
    for name, (calm, hit) in traces.items():
        paired = paired_difference([c.accuracy for c in calm], [h.accuracy for h in hit])  # same task and noise
        drop[name] = {"points": 100 * paired["mean"], "se_points": 100 * paired["se"]}
    return {
        "config": {**cfg.to_dict(), "env": clean_env_config(cfg.env).to_dict()},
        "attack": {"n_adversaries": args.adversarial,
                   "position": position if position == "random" else list(position),
                   "env": attacked_env_config(cfg.env, args.adversarial, position).to_dict()},
        "checkpoint": None if args.checkpoint is None else str(args.checkpoint),
        "episodes": episodes,
        "seed": seed,
        "clean": clean,
        "attacked": attacked,
        "drop": drop,
        "adversaries": {"per_episode": per_episode, "count_by_agent": counts.tolist()},
        "_traces": traces,
    }


# -- reporting ----------------------------------------------------------------------------


def tables(result: dict[str, Any]) -> str:
    """Table 2, Table 3 and the Appendix E analysis as text."""
    clean, attacked, drop = result["clean"], result["attacked"], result["drop"]
    episodes, attack = result["episodes"], result["attack"]
    where = "placed at random per episode" if attack["position"] == "random" else f"at agent(s) {attack['position']}"
    env = result["config"]["env"]
    out = [f"Robustness on {EnvConfig.from_dict(env).team_label} (N={env['n_agents']}, T={env['rounds']}), {episodes} held-out episodes "
           f"per policy and condition; {attack['n_adversaries']} adversarial agent(s) {where}.", "",
           "Table 2: accuracy in points (0-100, higher is better) clean and attacked; drop = clean minus attacked, "
           "in points (paired standard error; smaller is more robust)."]
    rows = [{"policy": p, "acc clean": points(clean[p]["accuracy"]), "acc attacked": points(attacked[p]["accuracy"]),
             "drop (pts)": f"{drop[p]['points']:.2f} ({drop[p]['se_points']:.2f})"} for p in clean]
    out += [format_table(rows, ("policy", "acc clean", "acc attacked", "drop (pts)")), ""]
    out.append(f"Table 3: total tokens over the {episodes} episodes, and per task.")
    rows = [{"policy": p, "total clean": f"{clean[p]['total_tokens']:,}",
             "total attacked": f"{attacked[p]['total_tokens']:,}",
             "per task clean": f"{clean[p]['tokens_per_task']:.0f}",
             "per task attacked": f"{attacked[p]['tokens_per_task']:.0f}"} for p in clean]
    out += [format_table(rows, ("policy", "total clean", "total attacked", "per task clean", "per task attacked")), ""]
    if "qmix" in clean:
        out.append("Appendix E: QMIX's action distribution per round (% of agent choices).")
        rows = []
        for label, entry in (("clean", clean["qmix"]), ("attacked", attacked["qmix"])):
            for t, shares in enumerate(entry["action_distribution_by_round"]):
                rows.append({"run": label, "round": str(t + 1), **{a: f"{100 * shares[a]:.1f}" for a in ACTION_NAMES}})
        out += [format_table(rows, ("run", "round", *ACTION_NAMES)), ""]
    out.append("Appendix E: out-degree (edges sent per round) of the adversaries under attack vs the same agents "
               "in the clean episodes, and of the other agents.")
    rows = [{"policy": p, "adv. clean": f"{clean[p]['adversary_out_degree']:.3f}",
             "adv. attacked": f"{attacked[p]['adversary_out_degree']:.3f}",
             "others clean": f"{clean[p]['honest_out_degree']:.3f}",
             "others attacked": f"{attacked[p]['honest_out_degree']:.3f}"} for p in clean]
    out.append(format_table(rows, ("policy", "adv. clean", "adv. attacked", "others clean", "others attacked")))
    return "\n".join(out)


def write_plots(result: dict[str, Any], out_dir: Path) -> list[Path]:
    """robustness.png; with QMIX also actions_qmix.png and topology_qmix_clean.png /
    topology_qmix_attacked.png (its first held-out episode in both runs, adversaries outlined)."""
    from topo_env.frontends.plots import draw_topology, plot_action_distribution, plot_robustness, save_figure

    roles = result["config"]["env"]["roles"]
    k = result["attack"]["n_adversaries"]
    written = [save_figure(plot_robustness(result["clean"], result["attacked"],
                                           title=f"{k} adversarial agent(s), {result['episodes']} episodes"),
                           out_dir / "robustness.png")]
    if "qmix" in result["clean"]:
        dist = {"qmix clean": result["clean"]["qmix"]["action_distribution_by_round"],
                "qmix attacked": result["attacked"]["qmix"]["action_distribution_by_round"]}
        written.append(save_figure(plot_action_distribution(dist, title="QMIX actions per round"),
                                   out_dir / "actions_qmix.png"))
        calm, hit = result["_traces"]["qmix"]
        for label, trace in (("clean", calm[0]), ("attacked", hit[0])):
            fig = draw_topology(trace.adjacency, trace.actions, roles, adversaries=trace.adversaries,
                                targets=trace.targets, title=f"QMIX, first held-out episode, {label}")
            written.append(save_figure(fig, out_dir / f"topology_qmix_{label}.png"))
    return written


def main(argv: Sequence[str] | None = None) -> int:
    """Run the study; bad input of any kind is one line on stderr and status 2 (see topo_env.engine.cli)."""
    args = build_parser().parse_args(argv)
    try:
        cfg, checkpoint = load_setting(args)
        position = parse_position(args.adversary_position, args.adversarial, cfg.env.n_agents)
        names = policy_names(args.policies, checkpoint is not None)
        attacked_env_config(cfg.env, args.adversarial, position)  # validates before any episode runs
    except (ConfigError, ValueError) as err:
        fail(PROG, str(err))
    if args.out is not None:
        out_dir = Path(args.out)
    elif args.checkpoint is not None:
        path = Path(args.checkpoint)
        out_dir = path if path.is_dir() else path.parent
    else:
        out_dir = Path(f"runs/robustness-{cfg.env.team_label}")
    result = run_study(args, cfg, checkpoint, names, position)
    out_dir.mkdir(parents=True, exist_ok=True)
    public = {k: v for k, v in result.items() if not k.startswith("_")}
    (out_dir / "robustness.json").write_text(json.dumps(public, indent=2))
    plots = [] if args.no_plots else write_plots(result, out_dir)
    if args.json:
        print(json.dumps(public))
    else:
        print(tables(result))
        source = f"checkpoint {args.checkpoint}" if args.checkpoint is not None else \
            f"config {args.config or DEFAULT_CONFIG}"
        scored = f"{source} on {cfg.env.team_label}, {result['episodes']} held-out episodes per policy " \
                 f"and condition"
        notes = ["Accuracy is in points (higher is better); tokens: lower is cheaper.",
                 standard_error_note("drop (pts)")]
        written = [("results (robustness.json)", out_dir / "robustness.json")] + [("plot", p) for p in plots]
        print("\n" + closing_note(scored, notes, written))
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main, PROG))
