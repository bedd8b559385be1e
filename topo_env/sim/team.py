"""The simulated team behind ``backend="sim"``: the model of :mod:`topo_env.sim.model`
behind the :class:`topo_env.engine.team_backend.TeamBackend` interface."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from topo_env.engine.decision import (
    LLM_DECISION, DecisionMode, parse_decision, picked_reply, settings_decision,
)
from topo_env.engine.team_backend import AgentCall, AgentReply, Decision, Message, Verdict
from topo_env.sim.descriptors import descriptor_lines
from topo_env.sim.model import (
    NO_ANSWER, AgentFeatures, EpisodeNoise, Input, TaskFeatures, draw_noise, simulate_call, simulate_decision,
    simulate_verdict, simulate_vote, wrong_label_cdf,
)
from topo_env.sim.numerics import SCALARS
from topo_env.sim.profiles import SimProfile, get_profile
from topo_env.sim.tasks import SimTaskSource
from topo_env.engine.tasks import Task

if TYPE_CHECKING:
    from topo_env.engine.team_backend import TeamSettings

ROLE_TITLES = {
    "math": "MathSolver",
    "code": "CodeWriter",
    "reasoning": "ReasoningAgent",
}


class SimTeamBackend:
    """Simulated agents: answers, confidence and token costs from the documented model, called on
    one call's Python numbers (``xp=SCALARS``: the per-episode path of :mod:`topo_env.sim.model`).

    Holds no live resources, so it pickles. Per episode it keeps the task and the
    pre-drawn noise (``self.noise``), indexed by (round, agent, phase) so results do not
    depend on the order in which calls arrive.
    """

    concurrent = False

    def __init__(self, profile: SimProfile, team: tuple | None = None, roles: tuple[str, ...] | None = None,
                 descriptors: bool = False, decision: DecisionMode | str = LLM_DECISION,
                 train_tasks: int | None = None):
        self.profile = profile
        self.decision = parse_decision(decision)  # the decision node, a vote or one agent (EnvConfig.decision)
        self.descriptors = descriptors  # DyTopo's NEED/OFFER lines in the replies (EnvConfig.descriptors)
        self.team = team
        self.roles = roles
        self._team_size = 0
        self.domain = profile.domain
        self.tasks = SimTaskSource(profile, train_tasks)  # train_tasks: EnvConfig.train_tasks
        self._cdf = wrong_label_cdf(profile)
        self.task: Task | None = None
        self.noise: EpisodeNoise | None = None
        self._calls: list | None = None
        self._decision: list | None = None
        self._labels: dict[str, int] = {}
        self._titles = {"specialist": ROLE_TITLES[self.domain], "analyzer": "AnalyzeAgent", "decider": "FinalRefer"}

    @classmethod
    def from_config(cls, config: TeamSettings) -> "SimTeamBackend":
        """The simulated team of ``config.backend.profile`` (the ``"sim"`` factory of :mod:`topo_env.engine.backend_registry`)."""
        sim = config.backend  # a SimBackendConfig, or a plug-in's config naming a profile
        return cls(get_profile(sim.profile), getattr(sim, "team", None), config.roles, config.descriptors,
                   settings_decision(config), config.train_tasks)

    # -- episode -------------------------------------------------------------------------
    def sample_task(self, rng: np.random.Generator, split: str) -> Task:
        return self.tasks.sample(rng, split)

    def task_at(self, split: str, index: int) -> Task:
        """Task ``index`` of ``split``: the same task in every process."""
        return self.tasks.task(split, index)

    def start_episode(self, task: Task, rng: np.random.Generator, n_agents: int, rounds: int) -> None:
        needed = ("difficulty", "latent", "answers", "subject_index")
        if any(k not in task.hidden for k in needed) or "prompt_tokens" not in task.metadata:
            raise ValueError(
                f"task {task.id!r} is not a simulated task (needs hidden {list(needed)} and metadata "
                "prompt_tokens); "
                "use backend kind 'sim' only with tasks from topo_env.sim.tasks.SimTaskSource"
            )
        self.task = task
        self.noise = draw_noise(rng, self.profile, 1, rounds, n_agents)
        self._calls = self.noise.calls[0].tolist()
        self._decision = self.noise.decision[0].tolist()
        self._labels = {s: k for k, s in enumerate(task.hidden["answers"])}
        self._choices = task.hidden["answers"]
        h = task.hidden
        s = self._subject = h["subject_index"]
        self._task_features = TaskFeatures(h["difficulty"], h["latent"], task.metadata["prompt_tokens"],
                                           self.profile.verifiability[s])
        if self._team_size != n_agents:  # (N, S) skills and verbosities, computed once per team size
            models = self.profile.team_models(n_agents, self.team)
            self._skills = self.profile.skills(n_agents, self.team)
            self._verbosity = [model.verbosity for model in models]
            self._team_size = n_agents
        offset = self.profile.subject_offsets[s]
        blind = self.noise.blind[0].tolist()
        # per agent: (b_s + k_is, k_is, u_i, verbosity), the AgentFeatures fields fixed for the episode
        self._agents = [(offset + self._skills[i][s], self._skills[i][s], blind[i], self._verbosity[i])
                        for i in range(n_agents)]

    # -- calls ---------------------------------------------------------------------------
    def _input(self, m: Message) -> Input:
        label = self._label(m.answer)
        return Input(label, 0.5 if m.confidence is None else m.confidence, m.content_tokens, int(m.verdict))

    def _label(self, answer: str | None) -> int:
        """An answer's label: :data:`NO_ANSWER` for none, the trap for one the task does not list."""
        return NO_ANSWER if answer is None else self._labels.get(answer, 1)

    def _text(self, role: str, label: int, conf: float) -> tuple[str | None, str]:
        if label == NO_ANSWER:  # a reply with no readable answer (topo_env.sim.model, step 6b)
            return None, f"[{self._titles[role]}] (no answer)"
        answer = self._choices[label]
        return answer, f"[{self._titles[role]}] answer: {answer} (confidence {conf:.2f})"

    async def call_agent(self, call: AgentCall) -> AgentReply:
        phase_index = 1 if call.phase == "revise" else 0
        noise = self._calls[call.round][call.agent][phase_index]
        prev = self._input(call.own_previous) if call.own_previous is not None else None
        strength, skill, blind, verbosity = self._agents[call.agent]
        agent = AgentFeatures(call.role, strength, skill, blind, verbosity, call.adversarial)
        shown = [(True, self._input(m)) for m in call.messages]
        out = simulate_call(SCALARS, self.profile, self._cdf, self._task_features, agent, prev, shown, noise)
        answer, text = self._text(call.role, out.label, out.confidence)
        if self.descriptors:  # DyTopo's need/offer lines (topo_env.sim.descriptors): they only hash the call's noise
            disagrees = any(m.label != out.label for _, m in shown)
            subject = self.profile.subject_names[self._subject]
            text = f"{text}\n{descriptor_lines(subject, skill, out.confidence, disagrees, call.adversarial, noise)}"
        return AgentReply(text=text, answer=answer, confidence=out.confidence, prompt_tokens=out.prompt_tokens,
                          completion_tokens=out.completion_tokens, content_tokens=out.content_tokens,
                          reasoning_tokens=out.reasoning_tokens)

    async def verify(self, call: AgentCall, reply: AgentReply, phase_index: int) -> tuple[Verdict, str]:
        noise = self._calls[call.round][call.agent][phase_index]
        label = self._label(reply.answer)
        verdict = Verdict(simulate_verdict(SCALARS, self.profile, label, noise, self._task_features.verifiability))
        tool = {"tests": "visible tests", "python": "python check"}.get(self.profile.verifier, "")
        text = "" if verdict == Verdict.NONE else f"[{tool}] {'passed' if verdict == Verdict.PASS else 'failed'}"
        return verdict, text

    async def decide(self, task: Task, finals: tuple[Message, ...]) -> Decision:
        if self.decision.kind != "llm":  # a vote or one agent's answer (simulate_vote): no call, no tokens
            out = simulate_vote(SCALARS, [(True, self._input(m)) for m in finals], [m.sender for m in finals],
                                self.decision.agent, 0)
            own = [m for m in finals if m.sender == self.decision.agent]  # agent K's final, where K ran
            picked = own[0] if own else next((m for m in finals if self._input(m).label == out.label), None)
            return Decision(reply=picked_reply(picked), accuracy=1.0 if out.label == 0 else 0.0)
        out = simulate_decision(SCALARS, self.profile, self._cdf, self._task_features, [(True, self._input(m)) for m in finals],
                                self._decision)
        answer, text = self._text("decider", out.label, out.confidence)
        reply = AgentReply(text=text, answer=answer, confidence=out.confidence, prompt_tokens=out.prompt_tokens,
                           completion_tokens=out.completion_tokens, content_tokens=out.content_tokens,
                           reasoning_tokens=out.reasoning_tokens)
        return Decision(reply=reply, accuracy=1.0 if out.label == 0 else 0.0)
