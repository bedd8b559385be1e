"""AgentConductor (seed 000): an orchestrator writes a layered DAG in YAML each turn, trained with GRPO.

The method (paper Sec. 2, App. C-D) on our env (graph mode):

* **Topology language** (Sec. 2.1, Fig. 1, App. A.3): :mod:`controllers.topology_language`: a YAML
  list of steps whose nodes call one team member each and ``ref`` nodes of earlier steps; parsed
  with ``yaml.safe_load`` and sorted into the four error classes of Table 1 / Eq. 10 (no YAML -2.0,
  parse -1.5, schema -1.0, logic -0.5; valid 0), then decoded into env rounds (RoundSpecs): a
  ref inside a round is an ``adjacency`` edge, a ref to an earlier round a ``recall``; the final
  step's nodes are verified (the verifier plays the paper's tester, App. C.3.6).
* **Turns** (Eq. 3, Algorithm 1): up to K = 2 turns; each turn's plan gets ``rounds // turns_left``
  of the env rounds still free. An invalid plan is penalised and its turn skipped (Algorithm 1
  lines 6-9: ``continue``); the next turn sees the error. After a valid turn the final step's
  verdicts (``info["outputs"][k]["verdict"]``) decide: PASS stops (early stopping, line 13), FAIL
  starts turn 2, whose plan sees the feedback and may rerun members (the executor shows a
  re-called member its own previous output: the paper's automatic self-edges) and, in the LLM
  path, ref turn-1 nodes (recalls). With no verdict at all (no verifier, e.g. mmlu_pro on the
  simulated team) there is no execution feedback to react to, so turn 2 is not played and the
  decision node answers after turn 1 (``second_turn_without_verdict`` turns it on).
* **Reward** (Eqs. 9, 13, 23-24): per turn r_k = YAML term (Table 1) + ``graph_weight`` x graph term
  (Eq. 13: S_complex (Eq. 7) if |V| <= N_max(l), else tanh((N_max - |V|)/N_max); an invalid turn
  has no graph); R = env return + sum_k gamma^(k-1) r_k. The task term is the env's own reward
  (Eq. 12 of topomarl: accuracy minus the token penalty, paid at the end) instead of the paper's
  code-verdict scale (PASSED 1.5 ... CE 0.6): it exists on every profile and is what the
  leaderboard scores.
* **Learned orchestrator** (Sec. 2.3, Eq. 8, App. D.2): a small torch network reads the task
  embedding ``obs["task"]`` (plus, in turn 2, 4 feedback numbers) and writes the plan as tokens of
  a tiny grammar: the number of steps (1..``max_steps``), per step which members it calls
  (Bernoulli per member), per node of step i and member of an earlier step j whether it refs it
  (Bernoulli). The tokens are serialised to YAML and parsed back by the same checker, so the
  learned writer speaks the language and can make its errors (an empty step is a schema error, a
  node no later node refs a logic error, a plan too long for its rounds a logic error); they are
  penalised like an LLM's. GRPO: for each task (one train reset seed) a group of G = 8 plans is
  played on the same seed (same task and noise), their returns are normalised within the group
  (Eq. 8) and the policy follows Eq. 25 with one gradient step per batch of fresh rollouts, where
  the ratio pi/pi_old is 1 and the clip never binds: the gradient is sum_i A_i (1/L_i) sum_u grad
  log pi(o_iu), L_i the trajectory's token count. Evaluation decodes greedily.
* **LLM orchestrator** (App. A.4): :func:`controllers.topology_language.build_prompt` and any callable
  ``write_yaml(prompt) -> str`` passed to :class:`AgentConductorController`; its text goes through
  the same checker and decoder (an exception of the callable counts as no YAML).

Deviations from the paper, and why:

* The difficulty level is fixed by the config (``difficulty``, default medium, N_max = 7) instead of
  inferred per task: the controller sees only the task embedding, and a self-reported level would
  be gamed by Eq. 7 (a flat 3-node plan scores S_complex 23.1 under N_max 4 and 30.2 under 10, so
  "hard" always pays). The cap enters the graph term exactly as Eq. 13 says.
* The density formula is followed as written (Eqs. 6-7). [!] Its value for any in-cap graph is at
  least about 5 (e.g. 16.10 for one node, N_max 4), while the paper reports baselines at 2.4-4.1;
  we follow the formula. Its size dominates the env reward (|reward| <~ 1): the learned writer is
  pushed to flat, edge-free plans (one step, S_edge = 1); ``graph_weight`` scales it (Eq. 9 says
  the terms are weighted but gives no weights; default 1).
* A small network instead of Qwen2.5-3B after LoRA SFT (no SFT stage, no reference model: the KL
  term of Eq. 25 is dropped, beta = 0); lr 1e-2 (Adam) instead of 1e-6, which is for a 3B LLM.
* gamma (Eq. 24) is not given in the paper: 1.
* Nodes are calls of our N team members, not the paper's role pool (planner, coder, ...); a member
  appears at most once per step (one round calls each member at most once); the tester role is the
  env's verifier on the final step.
* Recalls show a member's latest earlier output: a ref to a node whose member spoke again in a
  later round shows that later output (the env keeps only the latest output per member).
"""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any, Callable

import gymnasium
import numpy as np
import torch
from torch import nn

from controllers.base import (Controller, TrainingSpend, config_choice, config_flag, config_from_dict, config_integer,
                              config_number, graph_action, play_episode, train_seed)
from controllers.topology_language import (NODE_CAPS, CheckResult, build_prompt, check_plan, graph_term,
                                           plan_to_yaml)
from topo_env.engine.roles import ROLE_KINDS

logger = logging.getLogger(__name__)

TRAIN_EPISODES: int = 7040
"""Fig. 8 / App. A.2: 110 GRPO steps of batch 8 tasks x group 8 plans = 7,040 episodes, the
training the paper plots (it states no total budget); on the simulated team this fits in well
under a minute."""

ENV_ROUNDS: int | None = 6
"""K = 2 turns (App. A.2) x 3 rounds per turn: a medium plan of N_max = 7 nodes (Eq. 12) on a team of
3 members (each at most once per round) needs ceil(7 / 3) = 3 rounds. Unused rounds cost nothing:
the controller halts when its turns are over."""

FEEDBACK_DIM = 4  # turn-2 inputs: is turn 2, share of failed verdicts, turn-1 YAML invalid, turn-1 |V| / N_max


@dataclass
class AgentConductorConfig:
    """Hyperparameters (paper section / equation in each comment)."""

    turns: int = 2  # App. A.2: at most K = 2 interaction turns
    group_size: int = 8  # App. A.2, Eq. 8: G = 8 plans per task
    tasks_per_update: int = 8  # App. A.2: batch size 8 (tasks per GRPO step)
    lr: float = 1e-2  # App. A.2 uses 1e-6 for a 3B LLM; a ~20k-parameter network needs a larger step
    difficulty: str = "medium"  # Eq. 12 level whose N_max caps the graph term (fixed; see the docstring)
    gamma: float = 1.0  # Eq. 24 discount over turns (value not given in the paper)
    graph_weight: float = 1.0  # Eq. 9 weight of the graph term (weights not given: 1)
    max_steps: int = 4  # grammar: most steps a learned plan writes (ours; the paper's LLM has no cap)
    hidden: int = 64  # policy network width (ours; the paper's policy is Qwen2.5-3B)
    second_turn_without_verdict: bool = False  # Algorithm 1 needs a verdict to react to; see the docstring
    greedy_eval: bool = True  # outside training, decode the most likely plan (the paper states no inference sampling)

    @classmethod
    def from_dict(cls, d: dict | None) -> "AgentConductorConfig":
        """A config from a dict of field values; unknown keys and bad values raise a one-line ValueError."""
        return config_from_dict(cls, d, "AgentConductor config", {
            "turns": config_integer(1), "group_size": config_integer(2),  # Eq. 8 normalises within a group
            "tasks_per_update": config_integer(1), "max_steps": config_integer(1), "hidden": config_integer(1),
            "lr": config_number(0.0, low_open=True), "gamma": config_number(0.0, 1.0),
            "graph_weight": config_number(0.0), "difficulty": config_choice(NODE_CAPS),
            "second_turn_without_verdict": config_flag, "greedy_eval": config_flag})

    @property
    def n_max(self) -> int:
        """N_max(l) of Eq. 12 for the configured level."""
        return NODE_CAPS[self.difficulty]


def group_advantages(returns: Any, eps: float = 1e-8) -> np.ndarray:
    """Eq. 8: (R_i - mean R) / std R over one group (population std); all zeros when every
    return is equal (no preference to learn)."""
    r = np.asarray(returns, dtype=np.float64)
    std = float(r.std())
    if std < eps:
        return np.zeros_like(r)
    return (r - r.mean()) / std


@dataclass
class PlanChoice:
    """The grammar tokens of one learned plan: ``features`` (D,), ``n_steps`` in 1..S,
    ``members`` (S, N) bool (rows >= n_steps unused), ``refs`` (S, S, N, N) bool: ``refs[i, j, a,
    b]``: the node of member b in step i refs the node of member a in step j < i (a -> b)."""

    features: np.ndarray
    n_steps: int
    members: np.ndarray
    refs: np.ndarray


@dataclass
class TurnRecord:
    """What one turn wrote and earned: the text, its check (error class / reason), the YAML term,
    the graph term (0 when invalid), the plan's size, the verdict status after it ran ("passed",
    "failed", "none", "invalid") and the learned writer's tokens (None for the LLM writer)."""

    turn: int
    text: str
    error: str | None
    reason: str
    penalty: float
    graph: float
    n_nodes: int = 0
    n_edges: int = 0
    n_steps: int = 0
    status: str = ""
    choice: PlanChoice | None = None

    def reward(self, graph_weight: float) -> float:
        """r_k of Eq. 9: the YAML term plus the weighted graph term."""
        return self.penalty + graph_weight * self.graph


class PlanWriter(nn.Module):
    """The learned orchestrator: features (B, D) -> logits of the grammar's tokens: steps (B, S),
    members (B, S, N), refs (B, S, S, N, N)."""

    def __init__(self, in_dim: int, hidden: int, max_steps: int, n_agents: int, generator: torch.Generator):
        super().__init__()
        self.s, self.n = max_steps, n_agents
        self.body = nn.Sequential(nn.Linear(in_dim, hidden), nn.Tanh())
        self.steps = nn.Linear(hidden, max_steps)
        self.members = nn.Linear(hidden, max_steps * n_agents)
        self.refs = nn.Linear(hidden, max_steps * max_steps * n_agents * n_agents)
        with torch.no_grad():  # PyTorch's default init, drawn from our generator (no global RNG)
            for layer in (self.body[0], self.steps, self.members, self.refs):
                bound = 1.0 / math.sqrt(layer.in_features)
                layer.weight.copy_((torch.rand(layer.weight.shape, generator=generator) * 2 - 1) * bound)
                layer.bias.copy_((torch.rand(layer.bias.shape, generator=generator) * 2 - 1) * bound)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        h = self.body(x)
        b, s, n = x.shape[0], self.s, self.n
        return self.steps(h), self.members(h).view(b, s, n), self.refs(h).view(b, s, s, n, n)

    def log_prob(self, x: torch.Tensor, n_steps: torch.Tensor, members: torch.Tensor,
                 refs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Per plan (B,): the summed log-probability of its tokens and their count L."""
        steps_logits, member_logits, ref_logits = self(x)
        s = self.s
        logp = torch.log_softmax(steps_logits, dim=-1).gather(1, (n_steps - 1)[:, None])[:, 0]
        count = torch.ones_like(logp)
        step_used = torch.arange(s)[None, :] < n_steps[:, None]  # (B, S)
        member_mask = step_used[:, :, None].expand_as(members)
        m = members.float()
        member_lp = m * nn.functional.logsigmoid(member_logits) + (1 - m) * nn.functional.logsigmoid(-member_logits)
        logp = logp + (member_lp * member_mask).sum((1, 2))
        count = count + member_mask.sum((1, 2))
        earlier = torch.arange(s)[None, :] < torch.arange(s)[:, None]  # [i, j]: j < i
        ref_mask = (earlier[None, :, :, None, None] & step_used[:, :, None, None, None]
                    & members[:, None, :, :, None] & members[:, :, None, None, :])
        r = refs.float()
        ref_lp = r * nn.functional.logsigmoid(ref_logits) + (1 - r) * nn.functional.logsigmoid(-ref_logits)
        logp = logp + (ref_lp * ref_mask).sum((1, 2, 3, 4))
        count = count + ref_mask.sum((1, 2, 3, 4))
        return logp, count


def choice_to_yaml(choice: PlanChoice, turn: int) -> str:
    """Serialise the learned writer's tokens to the plan YAML (node ``t{turn}s{step}a{member}``)."""
    steps = []
    for i in range(choice.n_steps):
        nodes = []
        for b in np.flatnonzero(choice.members[i]):
            refs = [f"t{turn}s{j + 1}a{a}" for j in range(i) for a in np.flatnonzero(choice.members[j])
                    if choice.refs[i, j, a, b]]
            nodes.append((f"t{turn}s{i + 1}a{b}", int(b), refs))
        steps.append(nodes)
    return plan_to_yaml(steps)


class AgentConductorController(Controller):
    """AgentConductor on the orchestrator env (graph mode); see the module docstring.

    ``write_yaml``: an LLM orchestrator ``prompt -> YAML text`` (then nothing is learned);
    ``task_text``: ``(observation, info) -> the task's text`` for its prompt (default: the env's
    ``info["task_text"]``)."""

    name = "agentconductor"
    mode = "graph"
    trainable = True

    def __init__(self, n_agents: int, rounds: int, seed: int, config: AgentConductorConfig | None = None,
                 write_yaml: Callable[[str], str] | None = None,
                 task_text: Callable[[dict, dict], str] | None = None):
        self.n_agents, self.rounds, self.seed = int(n_agents), int(rounds), int(seed)
        self.config = config or AgentConductorConfig()
        self.write_yaml, self.task_text = write_yaml, task_text
        if write_yaml is not None:
            self.trainable = False
            self.name = "agentconductor_llm"
        self._generator = torch.Generator().manual_seed(self.seed)
        self.policy: PlanWriter | None = None
        self.optimizer: torch.optim.Optimizer | None = None
        self._sampling = False
        self.turns: list[TurnRecord] = []  # the current (last) episode's turns
        self._queue: list[Any] = []
        self._roles: tuple[str, ...] | None = None
        self._task = np.zeros(0, dtype=np.float32)
        self._observation: dict = {}
        self._rounds_used = 0
        self._placed: dict[str, tuple[int, int]] = {}
        self._last_placed: dict[str, tuple[int, int]] = {}
        self._final_members: list[int] = []
        self._outputs_of_last_turn: list[dict | None] = []

    # -- the policy ----------------------------------------------------------------------
    def _ensure_policy(self, task_dim: int) -> PlanWriter:
        if self.policy is None:
            cfg = self.config
            self.policy = PlanWriter(task_dim + FEEDBACK_DIM, cfg.hidden, cfg.max_steps, self.n_agents,
                                     self._generator)
            self.optimizer = torch.optim.Adam(self.policy.parameters(), lr=cfg.lr)
        return self.policy

    def _write_learned(self, features: np.ndarray) -> PlanChoice:
        policy = self._ensure_policy(len(features) - FEEDBACK_DIM)
        s = self.config.max_steps
        with torch.no_grad():
            steps_logits, member_logits, ref_logits = policy(torch.as_tensor(features, dtype=torch.float32)[None])
            if self._sampling or not self.config.greedy_eval:
                g = self._generator
                n_steps = int(torch.multinomial(torch.softmax(steps_logits[0], -1), 1, generator=g)) + 1
                members = torch.bernoulli(torch.sigmoid(member_logits[0]), generator=g).bool()
                refs = torch.bernoulli(torch.sigmoid(ref_logits[0]), generator=g).bool()
            else:
                n_steps = int(steps_logits[0].argmax()) + 1
                members, refs = member_logits[0] > 0, ref_logits[0] > 0
        members = members.numpy().copy()
        members[n_steps:] = False
        refs = refs.numpy().copy()
        mask = np.tril(np.ones((s, s), dtype=bool), -1)[:, :, None, None] & members[None, :, :, None] \
            & members[:, None, None, :]
        return PlanChoice(np.asarray(features, dtype=np.float32), n_steps, members, refs & mask)

    # -- episode -------------------------------------------------------------------------
    def begin(self, observation: dict, info: dict) -> None:
        agents = np.asarray(observation["agents"])
        self._roles = tuple(ROLE_KINDS[int(np.argmax(row[: len(ROLE_KINDS)]))] for row in agents)
        self._task = np.asarray(observation["task"], dtype=np.float32)
        self._observation = observation
        self.turns, self._queue = [], []
        self._rounds_used = 0
        self._placed, self._last_placed, self._final_members = {}, {}, []
        self._start_turn(info)

    def act(self, observation: dict, info: dict) -> Any:
        self._observation = observation
        while True:
            if self._queue:
                spec = self._queue.pop(0)
                self._rounds_used += 1
                halt = not self._queue and (len(self.turns) >= self.config.turns or self._rounds_used >= self.rounds)
                return graph_action(self.n_agents, spec.adjacency, spec.active, spec.verify, halt, spec.recall)
            if not self._another_turn(info):
                return graph_action(self.n_agents, halt=True)
            self._start_turn(info)

    def _another_turn(self, info: dict) -> bool:
        """Close the current turn (its verdict status) and say whether the next turn is played."""
        record = self.turns[-1]
        if record.error is not None:
            record.status = "invalid"
        else:
            outputs = info.get("outputs") or [None] * self.n_agents
            verdicts = [int(outputs[k]["verdict"]) for k in self._final_members if outputs[k] is not None]
            record.status = "passed" if 1 in verdicts else "failed" if -1 in verdicts else "none"
        if len(self.turns) >= self.config.turns or self._rounds_used >= self.rounds:
            return False
        if record.status == "none":
            return self.config.second_turn_without_verdict
        return record.status in ("invalid", "failed")

    def _features(self) -> np.ndarray:
        """The learned writer's input: the task block and the 4 feedback numbers (zeros in turn 1)."""
        feedback = np.zeros(FEEDBACK_DIM, dtype=np.float32)
        if self.turns:
            last = self.turns[-1]
            outputs = [o for o in self._outputs_of_last_turn if o is not None]
            failed = [o for o in outputs if int(o["verdict"]) == -1]
            feedback[:] = (1.0, len(failed) / max(len(outputs), 1), float(last.error is not None),
                           last.n_nodes / self.config.n_max)
        return np.concatenate([self._task, feedback])

    def _start_turn(self, info: dict) -> None:
        cfg = self.config
        turn = len(self.turns) + 1
        outputs = info.get("outputs") or [None] * self.n_agents
        self._outputs_of_last_turn = [outputs[k] for k in self._final_members]
        left = self.rounds - self._rounds_used
        budget = max(1, left // (cfg.turns - turn + 1))
        known = {name: (r - self._rounds_used, k) for name, (r, k) in self._last_placed.items()}
        choice = None
        if self.write_yaml is None:
            choice = self._write_learned(self._features())
            text = choice_to_yaml(choice, turn)
        else:
            text = self._ask_llm(turn, info, known)
        if text is None:
            result = CheckResult("no_yaml", "the YAML writer raised (see the log)")
            text = ""
        else:
            result = check_plan(text, self.n_agents, self._roles, budget, known)
        record = TurnRecord(turn, text, result.error, result.reason, result.penalty, 0.0, choice=choice)
        if result.error is None:
            plan = result.plan
            record.n_nodes, record.n_edges, record.n_steps = plan.n_nodes, plan.n_edges, plan.n_steps
            record.graph = graph_term(plan.n_nodes, plan.n_edges, plan.n_steps, cfg.n_max)
            self._queue = list(result.rounds)
            self._last_placed = {name: (r + self._rounds_used, k) for name, (r, k) in result.placement.items()}
            self._final_members = [node.agent for node in plan.steps[-1]]
        else:
            level = logging.WARNING if self.write_yaml is not None else logging.INFO
            logger.log(level, "AgentConductor turn %d: %s YAML error (penalty %.1f), turn skipped: %s", turn,
                       result.error, result.penalty, result.reason)
            self._queue, self._last_placed, self._final_members = [], {}, []
        self.turns.append(record)

    def _ask_llm(self, turn: int, info: dict, known: dict[str, tuple[int, int]]) -> str | None:
        question = self.task_text(self._observation, info) if self.task_text is not None else \
            str(info.get("task_text", ""))
        feedback = ""
        if self.turns:
            last = self.turns[-1]
            if last.error is not None:
                feedback = f"Your plan was rejected: [{last.error}] {last.reason}"
            else:
                lines = []
                for k, out in zip(self._final_members, self._outputs_of_last_turn):
                    if out is not None:
                        verdict = {1: "PASSED", -1: "FAILED", 0: "no verdict"}[int(out["verdict"])]
                        lines.append(f"agent {k}: {verdict}: {str(out['text'])[:300]}")
                feedback = "\n".join(lines)
        prompt = build_prompt(question, self.n_agents, self._roles, self.config.turns, NODE_CAPS, turn, feedback,
                              tuple(known))
        try:
            text = self.write_yaml(prompt)
        except Exception as exc:  # a client failure must not end the episode: the turn counts as no YAML
            logger.warning("AgentConductor turn %d: the YAML writer raised %s: %s", turn, type(exc).__name__, exc)
            return None
        return text if isinstance(text, str) else None

    def end(self, observation: dict, reward: float, info: dict) -> None:
        if self.turns and not self.turns[-1].status:
            self._another_turn(info)  # records the last turn's status

    def turn_return(self) -> float:
        """sum_k gamma^(k-1) r_k over the last episode's turns (Eq. 24 without the env's term)."""
        cfg = self.config
        return sum(cfg.gamma ** (t.turn - 1) * t.reward(cfg.graph_weight) for t in self.turns)

    # -- training ------------------------------------------------------------------------
    def train(self, env: gymnasium.Env, episodes: int, seed: int, progress: bool = False) -> TrainingSpend:
        """GRPO (Eq. 8, 25): ``episodes // group_size`` tasks, the k-th on reset seed
        ``train_seed(seed, k)`` of the train split, each played by ``group_size`` sampled plans."""
        if self.write_yaml is not None:
            return TrainingSpend()
        cfg = self.config
        groups = int(episodes) // cfg.group_size
        if groups * cfg.group_size != episodes:
            logger.info("AgentConductor training: %d episodes make %d groups of %d; %d left unplayed", episodes, groups,
                        cfg.group_size, episodes - groups * cfg.group_size)
        self._generator.manual_seed(self.seed * 1_000_003 + int(seed))
        report = TrainingSpend()
        batch: list[tuple[list[PlanChoice], float]] = []
        self._sampling = True
        try:
            for g in range(groups):
                returns, plans = [], []
                for _ in range(cfg.group_size):
                    record = play_episode(env, self, train_seed(seed, g), {"split": "train"})
                    returns.append(record.reward + self.turn_return())
                    plans.append([t.choice for t in self.turns])
                    report.episodes += 1
                    report.calls += record.calls
                    report.tokens += record.tokens
                batch += list(zip(plans, group_advantages(returns)))
                if (g + 1) % cfg.tasks_per_update == 0 or g == groups - 1:
                    self._update(batch)
                    batch = []
                if progress and (g + 1) % 50 == 0:
                    logger.info("AgentConductor training: group %d/%d, mean return %.3f", g + 1, groups, np.mean(returns))
        finally:
            self._sampling = False
        return report

    def _update(self, batch: list[tuple[list[PlanChoice], float]]) -> None:
        """One step on Eq. 25 with ratio 1: minimise -mean_i A_i (1/L_i) sum_u log pi(o_iu)."""
        batch = [(plan, adv) for plan, adv in batch if adv != 0.0]
        if not batch:
            return
        choices = [c for plan, _ in batch for c in plan]
        owner = torch.as_tensor([i for i, (plan, _) in enumerate(batch) for _ in plan])
        x = torch.as_tensor(np.stack([c.features for c in choices]))
        n_steps = torch.as_tensor([c.n_steps for c in choices])
        members = torch.as_tensor(np.stack([c.members for c in choices]))
        refs = torch.as_tensor(np.stack([c.refs for c in choices]))
        logp, count = self.policy.log_prob(x, n_steps, members, refs)
        trajectory_logp = torch.zeros(len(batch)).index_add(0, owner, logp)
        trajectory_len = torch.zeros(len(batch)).index_add(0, owner, count)
        advantages = torch.as_tensor([adv for _, adv in batch], dtype=torch.float32)
        loss = -(advantages * trajectory_logp / trajectory_len).mean()
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()

    # -- persistence ---------------------------------------------------------------------
    def state_dict(self) -> dict:
        if self.policy is None:
            return {}
        return {"in_dim": self.policy.body[0].in_features,
                "policy": {k: v.detach().clone() for k, v in self.policy.state_dict().items()}}

    def load_state_dict(self, state: dict) -> None:
        if not state:
            return
        self._ensure_policy(int(state["in_dim"]) - FEEDBACK_DIM)
        self.policy.load_state_dict(state["policy"])


def build(n_agents: int, rounds: int, seed: int, config: dict | None = None) -> AgentConductorController:
    """The learned AgentConductor for a team of ``n_agents`` on an env of ``rounds`` rounds."""
    return AgentConductorController(n_agents, rounds, seed, AgentConductorConfig.from_dict(config))
