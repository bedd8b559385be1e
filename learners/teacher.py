"""Distilling a privileged teacher into the agent network before TD learning (simulated team only).

The teacher starts from the adaptive reference of :mod:`topo_env.references.headroom` searched on what the
task text tells (``cached_references(..., context="readable")``): per subject a Bayes-optimal reader infers
from the text, the first-round joint action that paid best, then the second-round joint action for
round 1's agreement class, chosen by scoring open-loop sequences (and these closed-loop policies) on
thousands of simulated episodes with common random numbers. It reads each task as
:mod:`topo_env.references.reading` says (``sim_scale.teacher_reading``): by default it plays, of those
policies, the one of the highest expected reward under the reader's whole posterior over subject and
difficulty (``posterior``), else the policy of the most probable subject (``map``). It is privileged in
how it was found (the simulator replays tasks and noise, a real team cannot), not in what it reads:
an observation-reading policy can imitate it, which a TD learner would otherwise have to find by
trial on noisy rewards. (The hidden-context reference, which also knows the difficulty bucket and
the adversaries, is the yardstick of ``eval.headroom_share``, not a teacher: nothing observable
tells its choices apart.)

:func:`teacher_demonstrations` plays the teacher on simulated episodes through
:class:`~topo_env.frontends.vector_env.SimVectorEnv` and keeps what the agents saw and what the teacher
chose; :func:`distill` trains the agent network to choose the same per agent: cross-entropy with
``Q / temperature`` as logits, so that the Q-values stay on the reward's scale (a difference of
``temperature`` between two actions is a logit of 1) and TD learning can go on from them. Only the
agent network learns (the executed policy still reads observations only); the mixer starts
afresh with TD.
"""
from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F

from learners.agent_network import AgentQNetwork
from topo_env.references import headroom
from topo_env.references.headroom import agreement_class
from topo_env.references.reading import PosteriorPolicy, cached_posterior_policy, value_episodes
from topo_env.engine.seeding import teacher_env_seed
from topo_env.sim.tasks import TextReader
from topo_env.frontends.vector_env import SimVectorEnv

TEACHER_LR_SCHEDULES = ("constant", "one_cycle")
"""How :func:`distill`'s learning rate moves: ``constant`` at ``lr``; ``one_cycle``
(``torch.optim.lr_scheduler.OneCycleLR``, its defaults but ``pct_start=0.1``): from ``lr / 25`` up to ``lr``
over the first tenth of the steps, then cosine down to ``lr / 25 / 10^4``."""


@dataclasses.dataclass(frozen=True)
class Demonstrations:
    """E teacher episodes: ``obs`` (E, T, N, D) float32 and ``adjacency`` (E, T, N, N) float32 as
    the agents saw them before each round, ``actions`` (E, T, N) the teacher's joint actions."""

    obs: np.ndarray
    adjacency: np.ndarray
    actions: np.ndarray

    def __len__(self) -> int:
        return len(self.actions)


def teacher_demonstrations(venv: SimVectorEnv, teacher: PosteriorPolicy, seeds: Sequence[int],
                           chunk: int = 4096, reading: str = "posterior") -> Demonstrations:
    """The teacher played on the episodes ``seeds`` of ``venv``'s split, ``chunk`` at a time, each
    episode's policy chosen from its text by ``reading`` (:data:`~topo_env.references.reading.READINGS`).
    ``teacher`` must be that of ``venv``'s team (:func:`~topo_env.references.reading.cached_posterior_policy`)."""
    reader = TextReader(venv.profile)
    obs, adjacency, actions = [], [], []
    for start in range(0, len(seeds), chunk):
        part = list(seeds[start:start + chunk])
        step = venv.reset(part)
        episodes = venv.episodes
        policy = teacher.policies(*reader.posteriors(list(episodes.texts)), reading=reading)
        seen, adj, chosen = [], [], []
        for t in range(venv.rounds):
            outcome = np.zeros(len(part), np.int64) if t == 0 else agreement_class(venv.last_outputs.label)
            joint = policy[np.arange(len(part)), t, outcome]
            seen.append(step.observations)
            adj.append(step.sent_to.astype(np.float32))
            chosen.append(joint)
            step = venv.step(joint)
        obs.append(np.stack(seen, axis=1))
        adjacency.append(np.stack(adj, axis=1))
        actions.append(np.stack(chosen, axis=1))
    return Demonstrations(np.concatenate(obs), np.concatenate(adjacency), np.concatenate(actions))


def distill(agent: AgentQNetwork, demonstrations: Demonstrations, epochs: int, batch_size: int, lr: float,
            temperature: float, seed: int, device: torch.device | str = "cpu",
            lr_schedule: str = "constant") -> list[float]:
    """Train ``agent`` to pick the teacher's action per agent and round: ``epochs`` passes over the
    demonstrations in shuffled minibatches (``torch.Generator`` seeded by ``seed``), Adam at
    ``lr`` moved by ``lr_schedule`` (:data:`TEACHER_LR_SCHEDULES`), loss
    ``cross_entropy(Q / temperature, teacher action)``. Returns each epoch's mean loss."""
    if lr_schedule not in TEACHER_LR_SCHEDULES:
        raise ValueError(f"lr_schedule={lr_schedule!r}: must be one of {list(TEACHER_LR_SCHEDULES)}")
    device = torch.device(device)
    obs = torch.as_tensor(demonstrations.obs, device=device)
    adjacency = torch.as_tensor(demonstrations.adjacency, device=device)
    actions = torch.as_tensor(demonstrations.actions, device=device)
    optimizer = torch.optim.Adam(agent.parameters(), lr=lr)
    steps = int(epochs) * -(-len(demonstrations) // int(batch_size))
    schedule = (torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=lr, total_steps=steps, pct_start=0.1)
                if lr_schedule == "one_cycle" else None)
    order = torch.Generator().manual_seed(int(seed))
    agent.train()
    losses = []
    for _ in range(int(epochs)):
        total = 0.0
        for rows in torch.randperm(len(demonstrations), generator=order).split(int(batch_size)):
            q = agent.unroll(obs[rows], adjacency[rows])
            loss = F.cross_entropy(q.reshape(-1, q.shape[-1]) / temperature, actions[rows].reshape(-1))
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            if schedule is not None:
                schedule.step()
            total += loss.item() * len(rows)
        losses.append(total / len(demonstrations))
    agent.eval()
    return losses


def imitate_teacher(env_config, sim_scale, agent: AgentQNetwork, seed: int, device: torch.device | str = "cpu",
                    progress: bool = True) -> dict:
    """The teacher stage of a training run: the teacher of ``env_config``'s simulated team (its readable
    references and value table, found once and cached: :func:`topo_env.references.reading.cached_posterior_policy`),
    played with ``sim_scale.teacher_reading`` on ``sim_scale.teacher_episodes`` episodes (env seeds
    :func:`topo_env.engine.seeding.teacher_env_seed`) and distilled into ``agent``
    (:func:`distill` with the ``teacher_*`` settings of ``sim_scale``). Returns the report that
    results.json keeps: ``demonstrations``, ``search_episodes`` (the search's selection and
    re-ranking episodes, each replayed under every sequence), ``value_episodes`` (the value table's,
    each replayed under every candidate), ``search_cached``, ``reading``, ``epochs``, ``losses``
    (per epoch) and ``seconds``."""
    started = time.perf_counter()
    if progress:
        print("teacher: the adaptive reference on what the task text tells (searched once per team, then cached)",
              file=sys.stderr)
    teacher, cached = cached_posterior_policy(env_config, progress=progress)
    venv = SimVectorEnv(dataclasses.replace(env_config, split="train"))
    count = int(sim_scale.teacher_episodes)
    demonstrations = teacher_demonstrations(venv, teacher, [teacher_env_seed(seed, k) for k in range(count)],
                                            reading=sim_scale.teacher_reading)
    losses = distill(agent, demonstrations, sim_scale.teacher_epochs, sim_scale.teacher_batch_size,
                     sim_scale.teacher_lr, sim_scale.teacher_temperature, seed, device, sim_scale.teacher_lr_schedule)
    if progress:
        print(f"teacher: {count} demonstrations, {len(losses)} epochs, loss {losses[0]:.3f} -> {losses[-1]:.3f}",
              file=sys.stderr)
    selection = headroom.REFERENCE_SELECTION
    return {"demonstrations": count, "search_episodes": selection["samples"] + selection["rerank_samples"],
            "value_episodes": value_episodes(), "search_cached": bool(cached),
            "reading": sim_scale.teacher_reading, "epochs": len(losses), "losses": losses,
            "seconds": time.perf_counter() - started}
