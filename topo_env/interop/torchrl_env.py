"""The simulated team as one vectorised TorchRL env: B episodes of the PettingZoo env per step.

    from topo_env.interop.torchrl_env import TopologyTorchRLEnv
    env = TopologyTorchRLEnv(EnvConfig(), num_envs=1024, seed=0)   # batch_size [1024]
    rollout = env.rollout(4, break_when_any_done=False)            # (4, 1024): two episodes per row

:class:`TopologyTorchRLEnv` is a TorchRL ``EnvBase`` with ``batch_size=[B]`` over
:class:`~topo_env.frontends.vector_env.SimVectorEnv` (a team the batch simulator plays; any other
backend raises a ValueError naming its kind: such teams go one episode at a time through TorchRL's
``PettingZooWrapper`` over :class:`~topo_env.frontends.parallel_env.TopologyParallelEnv`). Its keys,
dtypes and per-row shapes are those of ``PettingZooWrapper(env=TopologyParallelEnv(cfg),
return_state=True, categorical_actions=True, use_mask=True)`` with B in front (N agents, D, S the
observation and state sizes), so BenchMARL's ``PettingZooClass`` spec methods read it unchanged:

- ``("agent", "observation", "observation")`` (B, N, D) float32; ``"state"`` (B, S) float32 (``env.state()``);
- ``("agent", "action_mask")`` (B, N, 6) bool, also the mask of the action spec (random actions respect it);
- ``("agent", "mask")`` (B, N) bool, always True: no agent leaves (where the wrapper marks every agent
  gone at a terminal step, with an all-True action mask there, since ``env.agents`` is then empty);
- ``("agent", "info", key)`` (B, N) float32 for the env's numeric infos (``calls``, ``round_tokens``,
  ``team_tokens``, ``edges``, ``density``, ``accuracy``, ``target``, ``in_degree``, ``out_degree``,
  ``tokens_estimated``) and ``("agent", "info", "sent_to")`` (B, N, N), at reset and after every step;
- ``("agent", "action")`` (B, N) int64, one of the six CommActions;
- ``("agent", "reward")`` (B, N, 1) float32: the team reward every agent receives, as the env pays it;
- ``"done"`` / ``"terminated"`` / ``"truncated"`` (B, 1) and ``("agent", ...)`` (B, N, 1) bool:
  terminated and done after the last round (a true terminal), truncated always False.

All B episodes have ``rounds`` rounds, so they end together; a reset resets every row (``_reset`` of
all rows, which once they ended is all the done ones). A partial reset cannot be honoured (the
batch simulator plays every row's rounds together) and raises a RuntimeError; a ``_reset`` of no
row changes nothing.

Seeding: after ``set_seed(seed)`` (or ``seed=`` at construction) the k-th reset (k = 0, 1, ...)
plays in row b the episode ``TopologyParallelEnv(cfg).reset(seed=seed + k * B + b)`` plays, on the
config's split; :meth:`~TopologyTorchRLEnv.episode_seeds` gives those seeds. For the same joint
actions every row then gives the PettingZoo env's observations, states, rewards, done flags and
infos (``tests/test_torchrl_env.py``). Unseeded, the base seed is drawn from numpy's
``default_rng()``.
"""
from __future__ import annotations

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase
from torchrl.data import Categorical, Composite, Unbounded
from torchrl.envs import EnvBase

from topo_env.engine.backend_registry import BATCH_SIMULATOR, backend_offers
from topo_env.frontends.comm_actions import N_ACTIONS
from topo_env.frontends.env_config import EnvConfig
from topo_env.frontends.parallel_env import INFO_KEYS
from topo_env.frontends.vector_env import SimVectorEnv, VectorStep

GROUP = "agent"
"""The one agent group, as TorchRL's PettingZooWrapper names it for agents ``agent_0 ... agent_{N-1}``."""
DONE_KEYS = ("done", "terminated", "truncated")


class TopologyTorchRLEnv(EnvBase):
    """B simulated-team episodes of the topology env stepped together (the module docstring is the
    contract: keys, shapes, resets, seeding). ``config``: the env's
    :class:`~topo_env.frontends.env_config.EnvConfig`; ``num_envs``: B; ``device``: where every
    tensor and spec lives."""

    def __init__(self, config: EnvConfig | None = None, num_envs: int = 1, seed: int | None = None,
                 device: torch.device | str = "cpu"):
        cfg = config or EnvConfig()
        if not backend_offers(cfg.backend, BATCH_SIMULATOR):
            raise ValueError(f"TopologyTorchRLEnv plays simulated teams only, not backend kind {cfg.backend.kind!r}: use "
                             "torchrl's PettingZooWrapper over topo_env.frontends.parallel_env.TopologyParallelEnv")
        if num_envs < 1:
            raise ValueError(f"num_envs={num_envs}: must be at least 1")
        super().__init__(device=device, batch_size=torch.Size([num_envs]))
        self.config = cfg
        self.num_envs, self.n_agents = num_envs, cfg.n_agents
        self.venv = SimVectorEnv(cfg)
        self.group_map = {GROUP: [f"agent_{i}" for i in range(cfg.n_agents)]}
        mask = np.ones(N_ACTIONS, dtype=bool)
        mask[list(cfg.disabled_actions)] = False
        self._action_mask = torch.as_tensor(mask, device=self.device).expand(num_envs, cfg.n_agents, N_ACTIONS)
        self._make_specs()
        self._last: VectorStep | None = None  # the current episodes' last step (None before the first reset)
        self._seeds: list[int] = []  # the current episodes' seeds
        self._set_seed(seed)

    # -- seeding -------------------------------------------------------------------------
    def _set_seed(self, seed: int | None) -> None:
        """The k-th reset from now plays the PettingZoo episodes ``seed + k * B + b`` (row b)."""
        self.base_seed = int(np.random.default_rng().integers(2**31)) if seed is None else int(seed)
        self.resets = 0  # resets since the last seeding

    def episode_seeds(self, reset: int | None = None) -> list[int]:
        """The PettingZoo env's seeds of the episodes the ``reset``-th reset since the last seeding
        plays, row by row (default: those of the current episodes)."""
        if reset is None:
            if not self._seeds:
                raise ValueError("no episodes yet: reset() first, or name a reset index")
            return list(self._seeds)
        return [self.base_seed + reset * self.num_envs + b for b in range(self.num_envs)]

    # -- TorchRL's interface -------------------------------------------------------------
    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs) -> TensorDictBase:
        rows = self._rows_to_reset(tensordict)
        if rows is not None and not rows.any() and self._last is not None:
            return self._observation(self._last, self._round_tokens)  # a reset of no row: nothing changes
        if rows is not None and rows.any() and not rows.all():
            raise RuntimeError(f"partial reset of rows {rows.nonzero().flatten().tolist()} of {self.num_envs}: the "
                               "batch simulator plays every row's rounds together; reset all rows (they end together)")
        self._seeds = self.episode_seeds(self.resets)
        self.resets += 1
        self._last = self.venv.reset(self._seeds)
        self._tokens_before = np.zeros((self.num_envs, self.n_agents), dtype=np.int64)
        self._round_tokens = self._tokens_before
        return self._observation(self._last, self._round_tokens)

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        actions = tensordict.get((GROUP, "action"))
        step = self.venv.step(actions.detach().cpu().numpy())
        tokens = self.venv.agent_tokens
        self._round_tokens, self._tokens_before = tokens - self._tokens_before, tokens.copy()
        self._last = step
        out = self._observation(step, self._round_tokens)
        reward = torch.as_tensor(step.rewards, dtype=torch.float32, device=self.device)
        out.set((GROUP, "reward"), reward[:, None, None].expand(self.num_envs, self.n_agents, 1).clone())
        return out

    # -- internals -----------------------------------------------------------------------
    def _rows_to_reset(self, tensordict: TensorDictBase | None) -> torch.Tensor | None:
        """(B,) bool: the rows any ``_reset`` entry names; None where there is none (reset all)."""
        if tensordict is None:
            return None
        flags = [tensordict.get(key, None) for key in self.reset_keys]
        flags = [f.reshape(self.num_envs, -1).any(-1) for f in flags if f is not None]
        if not flags:
            return None
        return torch.stack(flags).any(0)

    def _observation(self, step: VectorStep, round_tokens: np.ndarray) -> TensorDict:
        """Everything but the reward: observations, masks, infos, state and done flags of ``step``."""
        b, n, device = self.num_envs, self.n_agents, self.device
        infos = TensorDict({key: self._tensor(value) for key, value in self._infos(step, round_tokens).items()},
                           batch_size=(b, n), device=device)
        done = torch.full((b, 1), bool(step.terminated), device=device)
        truncated = torch.zeros((b, 1), dtype=torch.bool, device=device)
        group = TensorDict({
            "observation": TensorDict({"observation": self._tensor(step.observations)}, batch_size=(b, n),
                                      device=device),
            "action_mask": self._action_mask.clone(),
            "mask": torch.ones((b, n), dtype=torch.bool, device=device),
            "info": infos,
            "done": done[:, None].expand(b, n, 1).clone(),
            "terminated": done[:, None].expand(b, n, 1).clone(),
            "truncated": truncated[:, None].expand(b, n, 1).clone(),
        }, batch_size=(b, n), device=device)
        return TensorDict({GROUP: group, "state": self._tensor(step.state), "done": done, "terminated": done.clone(),
                           "truncated": truncated}, batch_size=(b,), device=device)

    def _infos(self, step: VectorStep, round_tokens: np.ndarray) -> dict[str, np.ndarray]:
        """The PettingZoo env's ``infos[agent][key]`` stacked (B, N) (``sent_to`` (B, N, N)), computed
        from the vector env as the env computes them (:data:`~topo_env.frontends.parallel_env.INFO_KEYS`)."""
        venv, b, n = self.venv, self.num_envs, self.n_agents
        graph = step.sent_to
        edges = graph.sum(axis=(1, 2))
        accuracy = venv.result.accuracy if venv.result is not None else np.zeros(b)
        per_episode = {"team_tokens": venv.team_tokens, "edges": edges, "density": edges / (n * (n - 1)),
                       "accuracy": accuracy}
        infos = {key: np.broadcast_to(np.asarray(value)[:, None], (b, n)) for key, value in per_episode.items()}
        infos.update(calls=step.calls, round_tokens=round_tokens, target=step.targets, in_degree=graph.sum(axis=1),
                     out_degree=graph.sum(axis=2), tokens_estimated=np.zeros((b, n)), sent_to=graph)
        return {key: infos[key] for key in INFO_KEYS}  # the simulated team's tokens are never estimated

    def _tensor(self, array: np.ndarray) -> torch.Tensor:
        return torch.as_tensor(np.ascontiguousarray(array, dtype=np.float32), device=self.device)

    def _make_specs(self) -> None:
        b, n, device = self.num_envs, self.n_agents, self.device
        venv = self.venv

        def unbounded(*shape: int) -> Unbounded:
            return Unbounded(shape=(b, *shape), dtype=torch.float32, device=device)

        def flags(*shape: int) -> Categorical:
            return Categorical(n=2, shape=(b, *shape), dtype=torch.bool, device=device)

        info = Composite({key: unbounded(n, n) if key == "sent_to" else unbounded(n) for key in INFO_KEYS},
                         shape=(b, n), device=device)
        group_observation = Composite({
            "observation": Composite({"observation": unbounded(n, venv.observation_dim)}, shape=(b, n), device=device),
            "action_mask": flags(n, N_ACTIONS),
            "mask": flags(n),
            "info": info,
        }, shape=(b, n), device=device)
        self.observation_spec = Composite({GROUP: group_observation, "state": unbounded(venv.state_dim)},
                                          shape=(b,), device=device)
        action = Categorical(n=N_ACTIONS, shape=(b, n), dtype=torch.int64, device=device,
                             mask=self._action_mask.clone())
        self.action_spec = Composite({GROUP: Composite({"action": action}, shape=(b, n), device=device)},
                                     shape=(b,), device=device)
        self.reward_spec = Composite({GROUP: Composite({"reward": unbounded(n, 1)}, shape=(b, n), device=device)},
                                     shape=(b,), device=device)
        group_done = Composite({key: flags(n, 1) for key in DONE_KEYS}, shape=(b, n), device=device)
        self.done_spec = Composite({**{key: flags(1) for key in DONE_KEYS}, GROUP: group_done}, shape=(b,),
                                   device=device)
