"""Typed, validated configuration of a QMIX run: ``env:``, ``learner:`` and ``train:`` sections
of one YAML file, with ``--set section.key=value`` overrides.

Where each key is documented: ``env`` in :class:`topo_env.frontends.env_config.EnvConfig` (its ``backend``
keys in :mod:`topo_env.engine.backend_registry`), ``learner`` in :class:`LearnerConfig`, ``train`` in
:class:`TrainConfig`."""
from __future__ import annotations

import dataclasses
import numbers
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


from learners.mixer import MIXERS
from topo_env.engine.cli import apply_set, parse_set
from topo_env.frontends.env_config import EnvConfig
from topo_env.engine.config_checks import ConfigError, check_int, check_number, load_yaml
from topo_env.engine.seeding import TEACHER_SEED_OFFSET

SECTIONS = ("env", "learner", "train")


@dataclass(frozen=True)
class LearnerConfig:
    """QMIX hyperparameters (defaults: paper Table 5 where it gives one).

    Attributes:
        hidden_dim: width of the agent network (GNN, GRU, MLP) (128).
        gnn_layers: message-passing layers (2).
        mixer_embed_dim, hypernet_dim: mixer width and hypernetwork hidden units (64, 64).
        lr: Adam learning rate (5e-4). gamma: discount (0.99). grad_clip: max grad norm (10).
        batch_size: episodes per update. buffer_size: replay capacity in episodes (5000).
        target_update: "hard" (copy every ``target_update_interval`` updates) or "soft"
            (Polyak with ``tau`` after every update).
        double_q: bootstrap with the online net's masked argmax.
        mixer: value decomposition: "qmix" (the paper's monotonic hypernetwork mixer), "vdn" (sum
            of the agents' Q-values) or "none" (independent Q-learning on the team reward);
            ``learners.mixer``.
        gnn: message passing between agents in the agent network (false: the ablation without it).
        dueling: the agent network's MLP ends in value + advantage streams (see
            ``learners.agent_network``). td_lambda: 0 = one-step TD.
        updates_per_episode: gradient updates each time the learner updates (after every
            episode, or every ``episodes_per_update``-th).
        episodes_per_update: updates follow every k-th collected episode only (episodes 0, k,
            2k, ... once the buffer holds the warm-up), so that each gradient step sees more
            fresh episodes; with a k times larger ``batch_size`` and ``buffer_size`` the replay
            ratio stays the same and the gradient noise falls (experiments/records/learning.md).
        lr_end: if set, the learning rate falls linearly from ``lr`` to ``lr_end`` over
            ``lr_anneal_episodes`` (None: the whole run), so that Q-values settle instead of
            tracking the reward noise; None keeps ``lr`` constant (the paper's setting).
        eps_start, eps_end: epsilon-greedy range, linear over ``eps_anneal_episodes``
            (None: the whole run).
        team_explore: share of the exploration made by the whole team at once (one shared
            random action for every agent in a round; see ``learners.runner.select_actions``);
            0 is the paper's independent epsilon-greedy.
        deviation_explore: share of the exploration made by one agent alone while its teammates
            play greedy (a single-agent deviation from the greedy team; same function).
            ``team_explore + deviation_explore`` is at most 1; the rest is independent.
        topology_explore: share of the exploration made by the whole team playing one of the fixed
            baselines' joint actions (solo, full, chain, star, debate; ``learners.runner.
            topology_library``), so that coordinated joint actions in which agents differ are
            tried; ``team_explore + deviation_explore + topology_explore`` is at most 1.
        deviation_rank_decay: how a deviating agent picks its action: the k-th best of its valid
            non-greedy actions (by its own Q-values, k = 0, 1, ...) has weight
            ``deviation_rank_decay ** k``; 1 draws them uniformly. Below 1 the deviations
            concentrate on the actions the greedy team nearly prefers, whose small gains take
            the most samples to tell apart.
        replicas: M > 0 (simulated team, batched training only): each stored round's target is
            its return from that round, the round's joint action then greedy play, averaged over M
            replicas of the episode with fresh simulator noise for the rounds left (before round 1
            also a fresh hidden task latent and blind spots: other tasks that read the same;
            ``learners.batch_runner``) instead of the one played return: M times less noise
            variance for M cheap simulator replays. 0: TD / Monte-Carlo targets of one episode.
        privileged_state: (simulated team, batched training only) the mixer's state also holds
            what the simulator knows and a real team does not (subject, difficulty, hidden latent,
            adversaries, blind spots; ``topo_env.frontends.vector_env.SimVectorEnv.privileged``): the
            mixer can explain the outcome's task-level variance, so less of it reaches the agent
            networks. The agent networks, i.e. the executed policy, still read observations only.
        teacher_episodes: (simulated team, batched training, N = 3, T <= 2) before TD learning, the
            agent network imitates a teacher on this many simulated episodes (0: no teacher): the
            adaptive reference searched on what the task text tells (``learners.teacher``; the
            search runs once per team and is cached). ``teacher_epochs`` passes over them, Adam at
            ``teacher_lr``, minibatches of ``teacher_batch_size``, cross-entropy on ``Q /
            teacher_temperature`` (so that Q-values stay on the reward's scale for TD to go on).
        mixer_warmup: the first this many updates train the mixer only (the agent network's
            gradients are dropped): after a teacher, a mixer that starts at random would otherwise
            send large errors into the agent network it learned.
        device: "auto" (CUDA when present), "cpu" or "cuda".
        torch_threads: CPU threads for torch (1 is fastest for these small networks).
        compile: ``torch.compile`` the update's loss (forward, targets; backward through
            AOTAutograd) and use Adam's fused kernel. The first update compiles (about 30 s on 2
            cores, a C++ compiler on PATH for CPU; cached on disk after), later ones run 5-30%
            faster (experiments/records/update-speed.md). Fused kernels round differently in the last bits,
            so a compiled run reproduces compiled runs, not eager ones.
    """

    hidden_dim: int = 128
    gnn_layers: int = 2
    mixer_embed_dim: int = 64
    hypernet_dim: int = 64
    lr: float = 5e-4
    gamma: float = 0.99
    grad_clip: float = 10.0
    batch_size: int = 32
    buffer_size: int = 5000
    target_update: str = "hard"
    target_update_interval: int = 200
    tau: float = 0.01
    double_q: bool = True
    mixer: str = "qmix"
    gnn: bool = True
    dueling: bool = False
    td_lambda: float = 0.0
    updates_per_episode: int = 1
    episodes_per_update: int = 1
    lr_end: float | None = None
    lr_anneal_episodes: int | None = None
    eps_start: float = 1.0
    eps_end: float = 0.05
    eps_anneal_episodes: int | None = None
    team_explore: float = 0.0
    deviation_explore: float = 0.0
    deviation_rank_decay: float = 1.0
    topology_explore: float = 0.0
    replicas: int = 0
    privileged_state: bool = False
    teacher_episodes: int = 0
    teacher_epochs: int = 4
    teacher_lr: float = 3e-3
    teacher_batch_size: int = 1024
    teacher_temperature: float = 0.05
    mixer_warmup: int = 0
    device: str = "auto"
    torch_threads: int = 1
    compile: bool = False

    def __post_init__(self) -> None:
        for key in ("hidden_dim", "gnn_layers", "mixer_embed_dim", "hypernet_dim", "batch_size", "buffer_size",
                    "target_update_interval", "updates_per_episode", "episodes_per_update", "torch_threads"):
            check_int(self, key, 1, prefix=_section(self))
        check_int(self, "replicas", 0, prefix=_section(self))
        check_int(self, "teacher_episodes", 0, prefix=_section(self))
        check_int(self, "mixer_warmup", 0, prefix=_section(self))
        for key in ("teacher_epochs", "teacher_batch_size"):
            check_int(self, key, 1, prefix=_section(self))
        check_number(self, "teacher_lr", 0.0, open_low=True, prefix=_section(self))
        check_number(self, "teacher_temperature", 0.0, open_low=True, prefix=_section(self))
        check_number(self, "lr", 0.0, open_low=True, prefix=_section(self))
        check_number(self, "gamma", 0.0, high=1.0, prefix=_section(self))
        check_number(self, "grad_clip", 0.0, open_low=True, prefix=_section(self), finite=False)  # inf: no clipping
        check_number(self, "tau", 0.0, high=1.0, open_low=True, prefix=_section(self))
        check_number(self, "td_lambda", 0.0, high=1.0, prefix=_section(self))
        check_number(self, "eps_start", 0.0, high=1.0, prefix=_section(self))
        check_number(self, "eps_end", 0.0, high=1.0, prefix=_section(self))
        check_number(self, "team_explore", 0.0, high=1.0, prefix=_section(self))
        check_number(self, "deviation_explore", 0.0, high=1.0, prefix=_section(self))
        check_number(self, "deviation_rank_decay", 0.0, high=1.0, open_low=True, prefix=_section(self))
        check_number(self, "topology_explore", 0.0, high=1.0, prefix=_section(self))
        if self.team_explore + self.deviation_explore + self.topology_explore > 1.0 + 1e-9:
            raise ConfigError(f"learner.team_explore={self.team_explore!r} + learner.deviation_explore="
                              f"{self.deviation_explore!r} + learner.topology_explore={self.topology_explore!r}: the "
                              "shares of exploration must sum to at most 1")
        if self.eps_anneal_episodes is not None:
            check_int(self, "eps_anneal_episodes", 1, prefix=_section(self))
        if self.lr_end is not None:
            check_number(self, "lr_end", 0.0, prefix=_section(self))
        if self.lr_anneal_episodes is not None:
            check_int(self, "lr_anneal_episodes", 1, prefix=_section(self))
        if self.target_update not in ("hard", "soft"):
            raise ConfigError(f"learner.target_update={self.target_update!r}: must be 'hard' or 'soft'")
        if self.mixer not in MIXERS:
            raise ConfigError(f"learner.mixer={self.mixer!r}: must be one of {list(MIXERS)}")
        if self.device not in ("auto", "cpu", "cuda"):
            raise ConfigError(f"learner.device={self.device!r}: must be 'auto', 'cpu' or 'cuda'")
        for key in ("double_q", "gnn", "dueling", "compile", "privileged_state"):
            if not isinstance(getattr(self, key), bool):
                raise ConfigError(f"learner.{key}={getattr(self, key)!r}: must be true or false")


@dataclass(frozen=True)
class RayConfig:
    """``train.ray``: rollouts on W Ray workers (:mod:`learners.distributed`; ``pip install
    'topomarl[distributed]'``).

    Attributes:
        address: "local" starts a Ray cluster on this machine for the run; "auto" joins the
            running cluster (``ray start --head`` here, ``ray start --address=...`` on the other
            machines); a ``host:port`` or ``ray://host:port`` address joins that cluster.
        workers: W, the rollout workers (Ray actors), each with its own env, backend client and
            ``train.episodes_in_flight`` episodes in flight.
    """

    address: str = "local"
    workers: int = 2

    def __post_init__(self) -> None:
        if not isinstance(self.address, str) or not (self.address in ("auto", "local") or ":" in self.address):
            raise ConfigError(f"train.ray.address={self.address!r}: must be 'auto', 'local' or a cluster address "
                              "(host:port, ray://host:port)")
        if isinstance(self.workers, bool) or not isinstance(self.workers, numbers.Integral) or self.workers < 1:
            raise ConfigError(f"train.ray.workers={self.workers!r}: must be an integer >= 1")
        object.__setattr__(self, "workers", int(self.workers))

    @classmethod
    def parse(cls, value: Any) -> "RayConfig | None":
        """``train.ray`` as written: None (no Ray), a mapping of the keys above, or a RayConfig."""
        if value is None or isinstance(value, RayConfig):
            return value
        if not isinstance(value, dict):
            raise ConfigError(f"train.ray={value!r}: must be a mapping such as {{address: local, workers: 2}}, "
                              "or null (no Ray)")
        known = {f.name for f in dataclasses.fields(cls)}
        bad = sorted(set(value) - known)
        if bad:
            raise ConfigError(f"unknown train.ray key(s) {bad}; known keys: {sorted(known)}")
        return cls(**value)


@dataclass(frozen=True)
class TrainConfig:
    """The run: how long, how it is seeded, logged, checkpointed and evaluated.

    Attributes:
        episodes: training episodes. seed: seeds every random source.
        warmup_episodes: episodes collected before the first update (>= batch size is used).
        eval_episodes: held-out (eval split) episodes per policy in the final comparison.
        checkpoint_every: episodes between checkpoints (and one at the end).
        log_every: episodes between TensorBoard summaries.
        references: with the simulated team (N = 3, T <= 2), also score the headroom references
            on the held-out episodes: ``best_fixed`` (the best fixed joint-action sequence) and
            ``adaptive`` (the privileged reference), and report ``eval.headroom_share`` = (qmix -
            best_fixed) / (adaptive - best_fixed) (:mod:`topo_env.references.headroom`; selected once per
            team and cached on disk, about 90 s the first time).
        save_buffer: put the replay buffer in checkpoints (needed for an exact resume).
        token_budget: stop training cleanly, with a checkpoint, once the team has spent this
            many tokens (0: no budget). Meant for runs against paid LLM APIs.
        call_budget: the same for LLM calls (each agent call and the decision node's; 0: no budget).
        curve_every: every this many training episodes (and before the first and after the last)
            score the greedy policy on the first ``curve_episodes`` held-out episodes (at most
            ``eval_episodes``): the learning
            curve of held-out reward against training episodes and LLM calls (results.json
            ``learning_curve``, ``sample_efficiency.png``). Reporting only (0: no curve); each point
            costs ``curve_episodes`` episodes of the team, which count toward no budget.
        validate_every: every this many episodes (and at the end), score the greedy policy on
            ``validate_episodes`` validation episodes: train-split tasks with fixed seeds, the
            same at every check, never the held-out ones. The best-scoring network is the
            policy evaluated at the end (0: no validation; the final network is evaluated).
        episodes_in_flight: K, the episodes played at once (training, validation and the
            held-out evaluation), on K env instances sharing one LLM client and its
            ``env.backend.max_concurrency`` (:mod:`learners.inflight`). 1 (the default) is the
            sequential run; for LLM backends use e.g. 16 (and ``max_concurrency`` >= the calls
            the server batches), so the server sees many requests at once. Episode k's task and
            noise do not depend on K; training episode j is played with the weights after the
            first ``max(0, j - K + 1)`` episodes (its ``policy_version`` in the replay), so a run
            is deterministic for any K and K = 1 is the sequential run bit for bit. Budget and
            Ctrl-C stops let the episodes already in flight finish (at most K - 1 more). A run
            resumed with K > 1 restarts the pipeline (its first K episodes share one policy
            version), so only K = 1 resumes into exactly the uninterrupted run.
        ray: None (the default: rollouts in this process), or ``{address: local | auto, workers:
            W}`` (:class:`RayConfig`): W rollout workers as Ray actors, each with K episodes in
            flight, feed this process's learner (:mod:`learners.distributed`). Episode j's task,
            noise and exploration are the single-process run's; batch b of K consecutive episodes
            is launched once batch b - W is committed, so a run is deterministic for given K, W
            and ``sync_every``. A worker that dies is restarted and its unfinished episodes re-run.
        sim_batch: B, the training episodes the simulated team plays at once (``env.backend:
            sim``): rollouts, replay and updates at simulator scale through the batch simulator
            (:mod:`learners.batch_runner`), the greedy evaluations too. Episode j is the PettingZoo
            env's episode j, played with the weights after the batch before its own; updates
            follow the episodes of a batch as in the one-episode loop (the same replay draws,
            learning rates and exploration rates per episode), and B = 1 is that loop exactly.
            0: the one-episode PettingZoo loop (the path of LLM teams, episodes in flight and Ray,
            which need it); LLM teams always take it.
        sync_every: with ``ray``, the learner ships its weights to the workers every this many
            committed episodes (one snapshot each time); an episode is played with the latest
            snapshot at its launch and stores its version. Without ``ray`` episodes take the
            weights of their launch (as with ``sync_every`` 1).
    """

    episodes: int = 2000
    seed: int = 0
    warmup_episodes: int = 64
    eval_episodes: int = 1000
    checkpoint_every: int = 500
    log_every: int = 50
    references: bool = True
    save_buffer: bool = True
    token_budget: int = 0
    call_budget: int = 0
    curve_every: int = 0
    curve_episodes: int = 2000
    validate_every: int = 0
    validate_episodes: int = 1000
    episodes_in_flight: int = 1
    ray: RayConfig | None = None
    sync_every: int = 1
    sim_batch: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "ray", RayConfig.parse(self.ray))
        for key in ("episodes", "eval_episodes", "checkpoint_every", "log_every", "validate_episodes",
                    "episodes_in_flight", "curve_episodes", "sync_every"):
            check_int(self, key, 1, prefix=_section(self))
        for key in ("seed", "warmup_episodes", "token_budget", "call_budget", "validate_every", "curve_every",
                    "sim_batch"):
            check_int(self, key, 0, prefix=_section(self))
        for key in ("save_buffer", "references"):
            if not isinstance(getattr(self, key), bool):
                raise ConfigError(f"train.{key}={getattr(self, key)!r}: must be true or false")


@dataclass(frozen=True)
class ExperimentConfig:
    env: EnvConfig = field(default_factory=EnvConfig)
    learner: LearnerConfig = field(default_factory=LearnerConfig)
    train: TrainConfig = field(default_factory=TrainConfig)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "ExperimentConfig":
        unknown = sorted(set(data) - set(SECTIONS))
        if unknown:
            raise ConfigError(f"unknown config section(s) {unknown}; known sections: {list(SECTIONS)}")
        parts = {}
        for name, kind in (("env", EnvConfig), ("learner", LearnerConfig), ("train", TrainConfig)):
            section = data.get(name) or {}
            if not isinstance(section, dict):
                raise ConfigError(f"config section {name!r} must be a mapping, got {section!r}")
            if kind is EnvConfig:  # its own checks: unknown keys, and the keys that moved under env.backend
                parts[name] = EnvConfig.from_dict(section)
                continue
            known = {f.name for f in dataclasses.fields(kind)}
            bad = sorted(set(section) - known)
            if bad:
                raise ConfigError(f"unknown {name} config key(s) {bad}; known keys: {sorted(known)}")
            parts[name] = kind(**section)
        return cls(**parts)

    def __post_init__(self) -> None:
        if self.batched and (self.train.episodes_in_flight > 1 or self.train.ray is not None):
            what = "train.ray" if self.train.ray is not None else f"train.episodes_in_flight={self.train.episodes_in_flight}"
            raise ConfigError(f"{what} with train.sim_batch={self.train.sim_batch}: the simulated team already plays "
                              "a batch at once; set train.sim_batch=0 to play it one episode at a time (the path of "
                              "episodes in flight and Ray, meant for LLM teams)")
        if self.learner.teacher_episodes and self.train.episodes > TEACHER_SEED_OFFSET:
            raise ConfigError(f"train.episodes={self.train.episodes} with a teacher: training episodes beyond "
                              f"{TEACHER_SEED_OFFSET:,} would replay the teacher's; train fewer or set "
                              "learner.teacher_episodes=0")

    def effective(self) -> tuple["ExperimentConfig", list[str]]:
        """This config as a run of its team uses it, and one note per option it turns off: the
        simulator-only learner options (``replicas``, ``privileged_state``, ``teacher_episodes``)
        need the batched simulated team (``env.backend`` sim, ``train.sim_batch`` > 0), and the
        teacher's search covers N = 3, T <= 2 only; elsewhere they are off."""
        lc, notes, off = self.learner, [], {}
        if not self.batched:
            off = {k: v for k, v in (("replicas", 0), ("privileged_state", False), ("teacher_episodes", 0))
                   if getattr(lc, k) != v}
            if off:
                notes.append(f"{', '.join(f'learner.{k}' for k in off)}: off for this run (they need the batched "
                             f"simulated team: env.backend sim and train.sim_batch > 0; here backend "
                             f"{self.env.backend.kind!r}, sim_batch {self.train.sim_batch})")
        elif lc.teacher_episodes and (self.env.n_agents != 3 or self.env.rounds > 2):
            off = {"teacher_episodes": 0}
            notes.append(f"learner.teacher_episodes: off for this team (the teacher's search covers N = 3 and T <= 2; "
                         f"here N = {self.env.n_agents}, T = {self.env.rounds})")
        if not off:
            return self, notes
        return dataclasses.replace(self, learner=dataclasses.replace(lc, **off)), notes

    @property
    def batched(self) -> bool:
        """Whether training plays the simulated team ``train.sim_batch`` episodes at a time."""
        return self.env.backend.kind == "sim" and self.train.sim_batch > 0

    def to_dict(self) -> dict[str, Any]:
        return {"env": self.env.to_dict(), "learner": dataclasses.asdict(self.learner),
                "train": dataclasses.asdict(self.train)}


DEFAULT_CONFIG = Path(__file__).resolve().parents[1] / "configs" / "default.yaml"
"""The repository's ``configs/default.yaml``: the scripts' default ``--config`` from any working directory."""


def load_experiment(path: str | Path | None, overrides: list[str] = ()) -> ExperimentConfig:
    """Read a YAML config (None: all defaults), apply ``--set`` overrides (``section.key=value``,
    nested keys as ``env.backend.base_url=...``; see :func:`topo_env.engine.cli.parse_set`), validate."""
    data = {} if path is None else load_yaml(path)
    data = {k: dict(v) if isinstance(v, dict) else v for k, v in data.items()}
    for text in overrides:
        keys, value = parse_set(text, SECTIONS)
        if not isinstance(data.get(keys[0]) or {}, dict):
            raise ConfigError(f"config section {keys[0]!r} must be a mapping")
        apply_set(data, keys, value)
    return ExperimentConfig.from_dict(data)


def _section(cfg: Any) -> str:
    return "learner" if isinstance(cfg, LearnerConfig) else "train"
