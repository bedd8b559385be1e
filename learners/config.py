"""Typed, validated configuration of a QMIX run: one YAML file of small sections, as BenchMARL
has them, with ``--set section.key=value`` overrides.

==============  ===================================================================================
section         what it holds
==============  ===================================================================================
``env``         the team and the episode: :class:`topo_env.frontends.env_config.EnvConfig` (its
                ``backend`` keys in :mod:`topo_env.engine.backend_registry`)
``qmix``        the networks, the mixer and the TD updates: :class:`QMIXConfig`
``exploration`` epsilon-greedy and its team, deviation and topology shares: :class:`ExplorationConfig`
``sim_scale``   the simulator-scale aids (batches of simulated episodes, noise samples, the
                privileged mixer state, the teacher): :class:`SimScaleConfig`; its ``batched``
                says whether a run is batched
``train``       how long, how seeded, evaluated, validated, checkpointed, budgeted: :class:`TrainConfig`
``runtime``     where it runs: device, threads, compile, episodes in flight, Ray: :class:`RuntimeConfig`
==============  ===================================================================================

Configs written before 0.2.0 (a ``learner`` section, ``train.sim_batch``, ``train.ray``, ...) are
read with one note that names where each old key went (:data:`MOVED_KEYS`); the old names go in the
next release."""
from __future__ import annotations

import dataclasses
import numbers
import sys
from dataclasses import dataclass, field
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

from learners.mixer import MIXERS
from learners.teacher import TEACHER_LR_SCHEDULES
from topo_env.references.reading import READINGS
from topo_env.engine.backend_registry import BATCH_SIMULATOR, backend_offers
from topo_env.engine.cli import apply_set, parse_set
from topo_env.engine.config_checks import ConfigError, check_choice, check_int, check_number, load_yaml
from topo_env.engine.seeding import EVAL_SEED_STRIDE, TEACHER_SEED_OFFSET
from topo_env.frontends.env_config import EnvConfig


def _check_bools(cfg: Any, *keys: str) -> None:
    for key in keys:
        if not isinstance(getattr(cfg, key), bool):
            raise ConfigError(f"{cfg.SECTION}.{key}={getattr(cfg, key)!r}: must be true or false")


@dataclass(frozen=True)
class QMIXConfig:
    """``qmix:`` the networks, the mixer and the TD updates (defaults: paper Table 5 where it gives one).

    Attributes:
        hidden_dim: width of the agent network (GNN, GRU, MLP) (128).
        gnn_layers: message-passing layers (2).
        gnn: message passing between agents in the agent network (false: the ablation without it).
        dueling: the agent network's MLP ends in value + advantage streams (see
            ``learners.agent_network``).
        mixer: value decomposition: "qmix" (the paper's monotonic hypernetwork mixer), "vdn" (sum
            of the agents' Q-values) or "none" (independent Q-learning on the team reward);
            ``learners.mixer``.
        mixer_embed_dim, hypernet_dim: mixer width and hypernetwork hidden units (64, 64).
        lr: Adam learning rate (5e-4). lr_end: if set, the learning rate falls linearly from ``lr``
            to ``lr_end`` over ``lr_anneal_episodes`` (None: the whole run), so that Q-values
            settle instead of tracking the reward noise; None keeps ``lr`` constant (the paper's).
        gamma: discount (0.99). grad_clip: max grad norm (10). td_lambda: 0 = one-step TD.
        batch_size: episodes per update. buffer_size: replay capacity in episodes (5000).
        target_update: "hard" (copy every ``target_update_interval`` updates) or "soft"
            (Polyak with ``tau`` after every update).
        double_q: bootstrap with the online net's masked argmax.
        updates_per_episode: gradient updates each time the learner updates (after every
            episode, or every ``episodes_per_update``-th).
        episodes_per_update: updates follow every k-th collected episode only (episodes 0, k,
            2k, ... once the buffer holds the warm-up), so that each gradient step sees more
            fresh episodes; with a k times larger ``batch_size`` and ``buffer_size`` the replay
            ratio stays the same and the gradient noise falls (experiments/records/learning.md).
        mixer_warmup: the first this many updates train the mixer only (the agent network's
            gradients are dropped): after a teacher, a mixer that starts at random would otherwise
            send large errors into the agent network it learned.
    """

    SECTION: ClassVar[str] = "qmix"
    hidden_dim: int = 128
    gnn_layers: int = 2
    gnn: bool = True
    dueling: bool = False
    mixer: str = "qmix"
    mixer_embed_dim: int = 64
    hypernet_dim: int = 64
    lr: float = 5e-4
    lr_end: float | None = None
    lr_anneal_episodes: int | None = None
    gamma: float = 0.99
    grad_clip: float = 10.0
    td_lambda: float = 0.0
    batch_size: int = 32
    buffer_size: int = 5000
    target_update: str = "hard"
    target_update_interval: int = 200
    tau: float = 0.01
    double_q: bool = True
    updates_per_episode: int = 1
    episodes_per_update: int = 1
    mixer_warmup: int = 0

    def __post_init__(self) -> None:
        for key in ("hidden_dim", "gnn_layers", "mixer_embed_dim", "hypernet_dim", "batch_size", "buffer_size",
                    "target_update_interval", "updates_per_episode", "episodes_per_update"):
            check_int(self, key, 1, prefix=self.SECTION)
        check_int(self, "mixer_warmup", 0, prefix=self.SECTION)
        check_number(self, "lr", 0.0, open_low=True, prefix=self.SECTION)
        check_number(self, "gamma", 0.0, high=1.0, prefix=self.SECTION)
        check_number(self, "grad_clip", 0.0, open_low=True, prefix=self.SECTION, finite=False)  # inf: no clipping
        check_number(self, "tau", 0.0, high=1.0, open_low=True, prefix=self.SECTION)
        check_number(self, "td_lambda", 0.0, high=1.0, prefix=self.SECTION)
        if self.lr_end is not None:
            check_number(self, "lr_end", 0.0, prefix=self.SECTION)
        if self.lr_anneal_episodes is not None:
            check_int(self, "lr_anneal_episodes", 1, prefix=self.SECTION)
        if self.target_update not in ("hard", "soft"):
            raise ConfigError(f"qmix.target_update={self.target_update!r}: must be 'hard' or 'soft'")
        if self.mixer not in MIXERS:
            raise ConfigError(f"qmix.mixer={self.mixer!r}: must be one of {list(MIXERS)}")
        _check_bools(self, "double_q", "gnn", "dueling")


@dataclass(frozen=True)
class ExplorationConfig:
    """``exploration:`` how training episodes explore: epsilon-greedy, and who explores.

    Attributes:
        eps_start, eps_end: epsilon-greedy range, linear over ``eps_anneal_episodes``
            (None: the whole run).
        team_explore: share of the exploration made by the whole team at once (one shared
            random action for every agent in a round; see ``learners.runner.select_actions``);
            0 is the paper's independent epsilon-greedy.
        deviation_explore: share of the exploration made by one agent alone while its teammates
            play greedy (a single-agent deviation from the greedy team; same function).
        topology_explore: share of the exploration made by the whole team playing one of the fixed
            baselines' joint actions (solo, full, chain, star, debate; ``learners.runner.
            topology_library``), so that coordinated joint actions in which agents differ are
            tried. ``team_explore + deviation_explore + topology_explore`` is at most 1; the rest
            is independent.
        deviation_rank_decay: how a deviating agent picks its action: the k-th best of its valid
            non-greedy actions (by its own Q-values, k = 0, 1, ...) has weight
            ``deviation_rank_decay ** k``; 1 draws them uniformly. Below 1 the deviations
            concentrate on the actions the greedy team nearly prefers, whose small gains take
            the most samples to tell apart.
    """

    SECTION: ClassVar[str] = "exploration"
    eps_start: float = 1.0
    eps_end: float = 0.05
    eps_anneal_episodes: int | None = None
    team_explore: float = 0.0
    deviation_explore: float = 0.0
    topology_explore: float = 0.0
    deviation_rank_decay: float = 1.0

    def __post_init__(self) -> None:
        for key in ("eps_start", "eps_end", "team_explore", "deviation_explore", "topology_explore"):
            check_number(self, key, 0.0, high=1.0, prefix=self.SECTION)
        check_number(self, "deviation_rank_decay", 0.0, high=1.0, open_low=True, prefix=self.SECTION)
        if self.team_explore + self.deviation_explore + self.topology_explore > 1.0 + 1e-9:
            raise ConfigError(f"exploration.team_explore={self.team_explore!r} + exploration.deviation_explore="
                              f"{self.deviation_explore!r} + exploration.topology_explore={self.topology_explore!r}: "
                              "the shares of exploration must sum to at most 1")
        if self.eps_anneal_episodes is not None:
            check_int(self, "eps_anneal_episodes", 1, prefix=self.SECTION)


@dataclass(frozen=True)
class SimScaleConfig:
    """``sim_scale:`` the aids of training at simulator scale. They need a team the batch simulator
    plays (``env.backend: sim``); elsewhere a run turns them off with a note
    (:meth:`ExperimentConfig.effective`). The greedy policy a run evaluates reads observations only.

    Attributes:
        batch: B, the training episodes the batch simulator plays at once: rollouts, replay and
            updates at simulator scale (:mod:`learners.batch_runner`), the greedy evaluations too.
            Episode j is the PettingZoo env's episode j, played with the weights after the batch
            before its own; updates follow the episodes of a batch as in the one-episode loop (the
            same replay draws, learning rates and exploration rates per episode), and B = 1 is that
            loop exactly. 0: the one-episode PettingZoo loop (the path of LLM teams, of episodes in
            flight and of Ray). :attr:`batched` says which.
        noise_samples: M > 0 (batched only): each stored round's target is its return from that
            round, the round's joint action then greedy play, averaged over M samples of the
            episode with fresh simulator noise for the rounds left (before round 1 also a fresh
            hidden task latent and blind spots: other tasks that read the same;
            ``learners.batch_runner``) instead of the one played return: M times less noise
            variance for M cheap simulator replays. 0: TD / Monte-Carlo targets of one episode.
        privileged_state: (batched only) the mixer's state also holds what the simulator knows and
            a real team does not (subject, difficulty, hidden latent, adversaries, blind spots;
            ``topo_env.frontends.vector_env.SimVectorEnv.privileged``): the mixer can explain the
            outcome's task-level variance, so less of it reaches the agent networks.
        teacher_episodes: (batched only) before TD learning, the agent network
            imitates a teacher on this many simulated episodes (0: no teacher): the adaptive
            reference searched on what the task text tells (``learners.teacher``; the search runs
            once per team and is cached). ``teacher_epochs`` passes over them, Adam at
            ``teacher_lr``, minibatches of ``teacher_batch_size``, cross-entropy on ``Q /
            teacher_temperature`` (so that Q-values stay on the reward's scale for TD to go on).
            ``teacher_lr_schedule``: ``constant`` (``teacher_lr`` throughout) or ``one_cycle``
            (``torch.optim.lr_scheduler.OneCycleLR``: up to ``teacher_lr`` over the first tenth of the
            steps, then cosine down to nearly 0; ``learners.teacher.TEACHER_LR_SCHEDULES``).
            ``teacher_reading``: how the teacher reads a task's text
            (``topo_env.references.reading.READINGS``): ``posterior`` (configs/default.yaml) plays
            the policy of the highest expected reward under the reader's posterior over subject and
            difficulty, ``map`` the policy of the most probable subject (the teacher before
            2026-11-29, so the default of a config, or a saved run, that does not name one).
    """

    SECTION: ClassVar[str] = "sim_scale"
    batch: int = 0
    noise_samples: int = 0
    privileged_state: bool = False
    teacher_episodes: int = 0
    teacher_epochs: int = 4
    teacher_lr: float = 3e-3
    teacher_batch_size: int = 1024
    teacher_temperature: float = 0.05
    teacher_lr_schedule: str = "constant"
    teacher_reading: str = "map"

    def __post_init__(self) -> None:
        for key in ("batch", "noise_samples", "teacher_episodes"):
            check_int(self, key, 0, prefix=self.SECTION)
        for key in ("teacher_epochs", "teacher_batch_size"):
            check_int(self, key, 1, prefix=self.SECTION)
        check_number(self, "teacher_lr", 0.0, open_low=True, prefix=self.SECTION)
        check_number(self, "teacher_temperature", 0.0, open_low=True, prefix=self.SECTION)
        check_choice(self, "teacher_lr_schedule", TEACHER_LR_SCHEDULES, prefix=self.SECTION)
        check_choice(self, "teacher_reading", READINGS, prefix=self.SECTION)
        _check_bools(self, "privileged_state")

    @property
    def batched(self) -> bool:
        """Whether training plays ``batch`` simulated episodes at a time: the one place that
        decides between the batched path and the one-episode loop (of an effective config:
        :meth:`ExperimentConfig.effective` sets ``batch`` to 0 for a team the batch simulator
        cannot play)."""
        return self.batch > 0

    def aids_on(self) -> dict[str, Any]:
        """The aids that need the batched path and are on: ``{key: value}``."""
        return {k: getattr(self, k) for k in ("noise_samples", "privileged_state", "teacher_episodes")
                if getattr(self, k)}


@dataclass(frozen=True)
class RayConfig:
    """``runtime.ray``: rollouts on W Ray workers (:mod:`learners.distributed`; ``pip install
    'topomarl[distributed]'``).

    Attributes:
        address: "local" starts a Ray cluster on this machine for the run; "auto" joins the
            running cluster (``ray start --head`` here, ``ray start --address=...`` on the other
            machines); a ``host:port`` or ``ray://host:port`` address joins that cluster.
        workers: W, the rollout workers (Ray actors), each with its own env, backend client and
            ``runtime.episodes_in_flight`` episodes in flight.
    """

    address: str = "local"
    workers: int = 2

    def __post_init__(self) -> None:
        if not isinstance(self.address, str) or not (self.address in ("auto", "local") or ":" in self.address):
            raise ConfigError(f"runtime.ray.address={self.address!r}: must be 'auto', 'local' or a cluster address "
                              "(host:port, ray://host:port)")
        if isinstance(self.workers, bool) or not isinstance(self.workers, numbers.Integral) or self.workers < 1:
            raise ConfigError(f"runtime.ray.workers={self.workers!r}: must be an integer >= 1")
        object.__setattr__(self, "workers", int(self.workers))

    @classmethod
    def parse(cls, value: Any) -> "RayConfig | None":
        """``runtime.ray`` as written: None (no Ray), a mapping of the keys above, or a RayConfig."""
        if value is None or isinstance(value, RayConfig):
            return value
        if not isinstance(value, dict):
            raise ConfigError(f"runtime.ray={value!r}: must be a mapping such as {{address: local, workers: 2}}, "
                              "or null (no Ray)")
        known = {f.name for f in dataclasses.fields(cls)}
        bad = sorted(set(value) - known)
        if bad:
            raise ConfigError(f"unknown runtime.ray key(s) {bad}; known keys: {sorted(known)}")
        return cls(**value)



@dataclass(frozen=True)
class TrainConfig:
    """``train:`` the run: how long, how it is seeded, evaluated, validated, logged, checkpointed
    and budgeted.

    Attributes:
        episodes: training episodes. seed: seeds every random source
            (:mod:`topo_env.engine.seeding`).
        warmup_episodes: episodes collected before the first update (>= ``qmix.batch_size`` is used).
        eval_episodes: held-out (eval split) episodes per policy in the final comparison; each
            seed has its own (disjoint across seeds, at most :data:`EVAL_SEED_STRIDE`).
        checkpoint_every: episodes between checkpoints (and one at the end).
        log_every: episodes between TensorBoard summaries.
        references: on a team the batch simulator plays (any N and T), also score the headroom
            references on the held-out episodes: ``best_fixed`` (the best fixed joint-action
            sequence) and ``adaptive`` (the privileged reference), and report
            ``eval.headroom_share`` = (qmix - best_fixed) / (adaptive - best_fixed)
            (:mod:`topo_env.references.headroom`; selected once per team and cached on disk,
            about 90 s the first time).
        save_buffer: put the replay buffer in checkpoints (needed for an exact resume).
        token_budget: stop training cleanly, with a checkpoint, once the team has spent this
            many tokens (0: no budget). Meant for runs against paid LLM APIs.
        call_budget: the same for LLM calls (each agent call and the decision node's; 0: no budget).
        curve_every: every this many training episodes (and before the first and after the last)
            score the greedy policy on the first ``curve_episodes`` held-out episodes (at most
            ``eval_episodes``): the learning curve of held-out reward against training episodes
            and LLM calls (results.json ``learning_curve``, ``sample_efficiency.png``). Reporting
            only (0: no curve); each point costs ``curve_episodes`` episodes of the team, which
            count toward no budget.
        validate_every: every this many episodes (and at the end), score the greedy policy on
            ``validate_episodes`` validation episodes: train-split tasks with fixed seeds, the
            same at every check, never the held-out ones. The best-scoring network is the
            policy evaluated at the end (0: no validation; the final network is evaluated).
    """

    SECTION: ClassVar[str] = "train"
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

    def __post_init__(self) -> None:
        for key in ("episodes", "eval_episodes", "checkpoint_every", "log_every", "validate_episodes",
                    "curve_episodes"):
            check_int(self, key, 1, prefix=self.SECTION)
        for key in ("seed", "warmup_episodes", "token_budget", "call_budget", "validate_every", "curve_every"):
            check_int(self, key, 0, prefix=self.SECTION)
        if self.eval_episodes > EVAL_SEED_STRIDE:
            raise ConfigError(f"train.eval_episodes={self.eval_episodes}: at most {EVAL_SEED_STRIDE:,}, so that "
                              "each seed's held-out episodes stay its own (topo_env/engine/seeding.py)")
        _check_bools(self, "save_buffer", "references")


@dataclass(frozen=True)
class RuntimeConfig:
    """``runtime:`` where and how a run executes; none of it changes what a run learns (but for
    ``compile``'s last bits, below).

    Attributes:
        device: "auto" (CUDA when present), "cpu" or "cuda".
        torch_threads: CPU threads for torch and for numpy's BLAS (1 is fastest for these small networks).
        compile: ``torch.compile`` the update's loss (forward, targets; backward through
            AOTAutograd) and use Adam's fused kernel. The first update compiles (about 30 s on 2
            cores, a C++ compiler on PATH for CPU; cached on disk after), later ones run 5-30%
            faster (experiments/records/update-speed.md). Fused kernels round differently in the
            last bits, so a compiled run reproduces compiled runs, not eager ones.
        episodes_in_flight: K, the episodes played at once (training, validation and the
            held-out evaluation) on the one-episode path, on K env instances sharing one LLM
            client and its ``env.backend.max_concurrency`` (:mod:`topo_env.frontends.inflight`). 1 (the
            default) is the sequential run; for LLM backends use e.g. 16 (and ``max_concurrency``
            >= the calls the server batches), so the server sees many requests at once. Episode
            k's task and noise do not depend on K; training episode j is played with the weights
            after the first ``max(0, j - K + 1)`` episodes (its ``policy_version`` in the replay),
            so a run is deterministic for any K and K = 1 is the sequential run bit for bit.
            Budget and Ctrl-C stops let the episodes already in flight finish (at most K - 1
            more). A run resumed with K > 1 restarts the pipeline (its first K episodes share one
            policy version), so only K = 1 resumes into exactly the uninterrupted run.
        ray: None (the default: rollouts in this process), or ``{address: local | auto, workers:
            W}`` (:class:`RayConfig`): W rollout workers as Ray actors, each with K episodes in
            flight, feed this process's learner (:mod:`learners.distributed`). Episode j's task,
            noise and exploration are the single-process run's; batch b of K consecutive episodes
            is launched once batch b - W is committed, so a run is deterministic for given K, W
            and ``sync_every``. A worker that dies is restarted and its unfinished episodes re-run.
        sync_every: with ``ray``, the learner ships its weights to the workers every this many
            committed episodes (one snapshot each time); an episode is played with the latest
            snapshot at its launch and stores its version. Without ``ray`` episodes take the
            weights of their launch (as with ``sync_every`` 1).
    """

    SECTION: ClassVar[str] = "runtime"
    device: str = "auto"
    torch_threads: int = 1
    compile: bool = False
    episodes_in_flight: int = 1
    ray: RayConfig | None = None
    sync_every: int = 1

    def __post_init__(self) -> None:
        object.__setattr__(self, "ray", RayConfig.parse(self.ray))
        for key in ("torch_threads", "episodes_in_flight", "sync_every"):
            check_int(self, key, 1, prefix=self.SECTION)
        if self.device not in ("auto", "cpu", "cuda"):
            raise ConfigError(f"runtime.device={self.device!r}: must be 'auto', 'cpu' or 'cuda'")
        _check_bools(self, "compile")


SECTION_CLASSES: dict[str, type] = {"qmix": QMIXConfig, "exploration": ExplorationConfig,
                                    "sim_scale": SimScaleConfig, "train": TrainConfig, "runtime": RuntimeConfig}
"""The sections besides ``env``, by name."""
SECTIONS = ("env", *SECTION_CLASSES)

MOVED_KEYS: dict[tuple[str, str], tuple[str, str]] = {
    **{("learner", f.name): ("qmix", f.name) for f in dataclasses.fields(QMIXConfig)},
    **{("learner", f.name): ("exploration", f.name) for f in dataclasses.fields(ExplorationConfig)},
    **{("learner", f.name): ("sim_scale", f.name) for f in dataclasses.fields(SimScaleConfig)
       if f.name.startswith("teacher_") or f.name == "privileged_state"},
    ("learner", "replicas"): ("sim_scale", "noise_samples"),
    **{("learner", key): ("runtime", key) for key in ("device", "torch_threads", "compile")},
    ("train", "sim_batch"): ("sim_scale", "batch"),
    **{("train", key): ("runtime", key) for key in ("episodes_in_flight", "ray", "sync_every")},
}
"""Keys of configs before 0.2.0 -> where they live now (read with a note for one release)."""


def moved_key(keys: tuple[str, ...]) -> tuple[str, ...]:
    """A ``--set`` key path with a pre-0.2.0 ``section.key`` replaced by its new place."""
    return (*MOVED_KEYS.get(tuple(keys[:2]), tuple(keys[:2])), *keys[2:]) if len(keys) >= 2 else keys


def upgrade_moved_keys(data: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """``data`` (sections as mappings) with every pre-0.2.0 key moved to its new section
    (:data:`MOVED_KEYS`) and the ``learner`` section gone; returns it and the moves made, as
    ``old -> new`` strings. A key of ``learner`` that never existed stays there, so that the
    unknown-section error names it."""
    data = {k: dict(v) if isinstance(v, dict) else v for k, v in data.items()}
    moves = []
    for (section, key), (new_section, new_key) in MOVED_KEYS.items():
        old = data.get(section)
        if isinstance(old, dict) and key in old:
            target = data.setdefault(new_section, {})
            if not isinstance(target, dict):
                raise ConfigError(f"config section {new_section!r} must be a mapping, got {target!r}")
            target.setdefault(new_key, old.pop(key))  # a key given in its new place wins
            moves.append(f"{section}.{key} -> {new_section}.{new_key}")
    if data.get("learner") == {}:
        del data["learner"]
    return data, moves


def say_moved(moves: list[str]) -> None:
    """The one-line note of a config read with pre-0.2.0 keys (stderr; nothing for no moves)."""
    if moves:
        print(f"note: this config uses names from before topomarl 0.2.0, read in their new places: "
              f"{', '.join(moves)} (CHANGELOG.md; the old names go in the next release)", file=sys.stderr)


@dataclass(frozen=True)
class ExperimentConfig:
    """One run's config: the team (``env``) and the sections of :data:`SECTION_CLASSES`."""

    env: EnvConfig = field(default_factory=EnvConfig)
    qmix: QMIXConfig = field(default_factory=QMIXConfig)
    exploration: ExplorationConfig = field(default_factory=ExplorationConfig)
    sim_scale: SimScaleConfig = field(default_factory=SimScaleConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    runtime: RuntimeConfig = field(default_factory=RuntimeConfig)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "ExperimentConfig":
        """Build from ``{section: {key: value}}``; pre-0.2.0 keys are moved with a note
        (:func:`upgrade_moved_keys`), unknown sections and keys are one-line ConfigErrors."""
        data, moves = upgrade_moved_keys(data)
        unknown = sorted(set(data) - set(SECTIONS))
        if unknown:
            raise ConfigError(f"unknown config section(s) {unknown}; known sections: {list(SECTIONS)}")
        parts = {}
        for name in SECTIONS:
            section = data.get(name) or {}
            if not isinstance(section, dict):
                raise ConfigError(f"config section {name!r} must be a mapping, got {section!r}")
            if name == "env":  # its own checks: unknown keys, and the backend's keys
                parts[name] = EnvConfig.from_dict(section)
                continue
            kind = SECTION_CLASSES[name]
            known = {f.name for f in dataclasses.fields(kind)}
            bad = sorted(set(section) - known)
            if bad:
                raise ConfigError(f"unknown {name} config key(s) {bad}; known keys: {sorted(known)}")
            parts[name] = kind(**section)
        built = cls(**parts)
        say_moved(moves)  # once it loaded: a config that fails says one line, its error
        return built

    def __post_init__(self) -> None:
        runtime = self.runtime
        if (self.sim_scale.batched and backend_offers(self.env.backend, BATCH_SIMULATOR)
                and (runtime.episodes_in_flight > 1 or runtime.ray is not None)):
            what = "runtime.ray" if runtime.ray is not None else f"runtime.episodes_in_flight={runtime.episodes_in_flight}"
            raise ConfigError(f"{what} with sim_scale.batch={self.sim_scale.batch}: the simulated team already plays "
                              "a batch at once; set sim_scale.batch=0 to play it one episode at a time (the path of "
                              "episodes in flight and Ray, meant for LLM teams)")
        if self.sim_scale.teacher_episodes and self.train.episodes > TEACHER_SEED_OFFSET:
            raise ConfigError(f"train.episodes={self.train.episodes} with a teacher: training episodes beyond "
                              f"{TEACHER_SEED_OFFSET:,} would replay the teacher's; train fewer or set "
                              "sim_scale.teacher_episodes=0")

    def effective(self) -> tuple["ExperimentConfig", list[str]]:
        """This config as a run of its team uses it, and the note (at most one) that names what it
        turned off: ``sim_scale`` is off (``batch`` 0 and no aids) for a team the batch simulator
        does not play; its aids (``noise_samples``, ``privileged_state``, ``teacher_episodes``) are
        off without a batch. Every run trains on its effective config."""
        sim, kind = self.sim_scale, self.env.backend.kind
        if not backend_offers(self.env.backend, BATCH_SIMULATOR):
            off = {"batch": 0} if sim.batch else {}
            off.update(dict.fromkeys(sim.aids_on(), 0))
            why = f"the batch simulator does not play backend {kind!r}: its episodes are played one at a time"
        elif not sim.batched:
            off = dict.fromkeys(sim.aids_on(), 0)
            why = f"they need the batch simulator's batches: sim_scale.batch > 0; here batch {sim.batch}"
        else:
            off = {}
        if not off:
            return self, []
        off = {key: type(getattr(sim, key))(value) for key, value in off.items()}  # privileged_state: False
        note = f"{', '.join(f'sim_scale.{k}' for k in off)}: off for this run ({why})"
        return dataclasses.replace(self, sim_scale=dataclasses.replace(sim, **off)), [note]

    def to_dict(self) -> dict[str, Any]:
        """``{section: {key: value}}``, what :meth:`from_dict` reads back."""
        return {"env": self.env.to_dict(),
                **{name: dataclasses.asdict(getattr(self, name)) for name in SECTION_CLASSES}}


DEFAULT_CONFIG = Path(__file__).resolve().parents[1] / "configs" / "default.yaml"
"""The repository's ``configs/default.yaml``: the scripts' default ``--config`` from any working directory."""


def load_experiment(path: str | Path | None, overrides: Sequence[str] = ()) -> ExperimentConfig:
    """Read a YAML config (None: all defaults), apply ``--set`` overrides (``section.key=value``,
    nested keys as ``env.backend.base_url=...``; see :func:`topo_env.engine.cli.parse_set`),
    validate. Pre-0.2.0 keys, in the file or in ``--set``, are read in their new places with one note."""
    return _with_sets({} if path is None else load_yaml(path), overrides)


def with_overrides(cfg: ExperimentConfig, overrides: Sequence[str]) -> ExperimentConfig:
    """``cfg`` with ``--set`` overrides applied (:func:`load_experiment`'s rules), validated again."""
    return _with_sets(cfg.to_dict(), overrides) if overrides else cfg


def _with_sets(data: dict[str, Any], overrides: Sequence[str]) -> ExperimentConfig:
    data, moves = upgrade_moved_keys(data)
    for text in overrides:
        keys, value = parse_set(text, (*SECTIONS, "learner"))
        new = moved_key(keys)
        if new != keys:
            moves.append(f"{'.'.join(keys[:2])} -> {'.'.join(new[:2])}")
        if not isinstance(data.get(new[0]) or {}, dict):
            raise ConfigError(f"config section {new[0]!r} must be a mapping")
        apply_set(data, new, value)
    cfg = ExperimentConfig.from_dict(data)
    say_moved(moves)
    return cfg
