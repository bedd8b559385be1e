"""Where the teacher's student parts from the teacher: how often the distilled agent network picks the teacher's
action, per round, on the demonstrations it learned from and on held-out episodes.

Training's teacher stage (:func:`learners.teacher.imitate_teacher`, the config's ``sim_scale.teacher_*``) distils
the readable adaptive reference into a fresh agent network (torch seeded by ``--seed``). The network then reads
the teacher's own trajectories: the first 8,192 episodes of the demonstrations it was trained on, and the teacher played on the
seed's first 8,192 held-out (eval-split) episodes. An agent agrees where its greedy action is the teacher's; a
round's joint action agrees where every agent's does. Round 1's choice depends only on what the reader infers
from the text, so round 1's agreement is how well the network reads the task embedding.

    python -m experiments.student_agreement --seeds 0 [--set sim_scale.teacher_epochs=16 ...]
"""
from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Sequence

import numpy as np
import torch

from learners.agent_network import build_agent_network
from learners.config import load_experiment
from learners.teacher import Demonstrations, imitate_teacher, teacher_demonstrations
from topo_env.engine.seeding import held_out_seed, teacher_env_seed
from topo_env.frontends.comm_actions import N_ACTIONS
from topo_env.frontends.vector_env import SimVectorEnv
from topo_env.references.reading import cached_posterior_policy

EPISODES = 8192


def agreement(agent, demonstrations: Demonstrations) -> tuple[np.ndarray, np.ndarray]:
    """(T,) share of agents whose greedy action is the teacher's, (T,) share of episodes whose whole joint
    action is, per round, over the first :data:`EPISODES` demonstrations."""
    rows = slice(0, EPISODES)
    with torch.no_grad():
        q = agent.unroll(torch.as_tensor(demonstrations.obs[rows]), torch.as_tensor(demonstrations.adjacency[rows]))
    same = q.argmax(dim=-1).numpy() == demonstrations.actions[rows]  # (E, T, N)
    return same.mean(axis=(0, 2)), same.all(axis=2).mean(axis=0)


def student_agreement(config: str, overrides: Sequence[str], seed: int) -> dict:
    """The teacher stage of a run of ``seed`` and its student's agreement with the teacher (module docstring)."""
    cfg = load_experiment(config, overrides)
    torch.set_num_threads(cfg.runtime.torch_threads)
    torch.manual_seed(seed)
    venv = SimVectorEnv(dataclasses.replace(cfg.env, split="train"))
    agent = build_agent_network(venv.obs_builder.dim, N_ACTIONS, cfg.qmix)
    report = imitate_teacher(cfg.env, cfg.sim_scale, agent, seed, progress=False)
    teacher, _ = cached_posterior_policy(cfg.env, progress=False)
    learned = range(min(EPISODES, report["demonstrations"]))
    reading = cfg.sim_scale.teacher_reading
    trained_on = teacher_demonstrations(venv, teacher, [teacher_env_seed(seed, k) for k in learned], reading=reading)
    held_out = teacher_demonstrations(SimVectorEnv(dataclasses.replace(cfg.env, split="eval")), teacher,
                                      list(range(held_out_seed(seed), held_out_seed(seed) + EPISODES)), reading=reading)
    return {"seed": seed, "loss": report["losses"][-1], "seconds": report["seconds"],
            "train": agreement(agent, trained_on), "held_out": agreement(agent, held_out)}


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m experiments.student_agreement", description=__doc__.split("\n\n")[0])
    p.add_argument("--config", default="configs/default.yaml")
    p.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE")
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    args = p.parse_args(argv)
    print("seed  final loss  teacher stage s  agent agrees (round 1, 2, ...)  joint action agrees     on")
    for seed in args.seeds:
        r = student_agreement(args.config, args.set, seed)
        for where in ("train", "held_out"):
            agents, joint = r[where]
            print(f"{seed:>4}  {r['loss']:.4f}      {r['seconds']:>7.0f}          {np.round(agents, 3)}"
                  f"                 {np.round(joint, 3)}   {'demonstrations' if where == 'train' else 'held-out'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
