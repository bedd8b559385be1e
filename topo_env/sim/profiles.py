"""Benchmark profiles and agent models of the simulated team (the parameters of :mod:`topo_env.sim.model`).

A :class:`SimProfile` stands for one benchmark: its subjects (with how often they occur, how hard
they are and how *verifiable* a shown derivation is), its difficulty distribution, its default team
and the parameters of the update model. An :class:`AgentModel` stands for one LLM (or one persona of
an LLM): a per-subject skill and a verbosity. ``alpha`` and ``rho`` (with ``theta`` where peers must
hurt) were fitted by ``python -m topo_env.sim.calibrate --fit`` so that, with N = 3 agents,

* agent 0 answering directly hits Table 1's "Base (direct)" accuracy (GPT-OSS:120B rows), and
* the fully connected team (everyone broadcast_all every round, then FinalRefer) hits "LLM-Debate",

both within 2 points (``tests/test_calibration.py``). Which numbers come from a publication and
which are modelling choices is said next to each group of fields and in :mod:`topo_env.sim.model`.
"""
from __future__ import annotations

import argparse
import math
import random
from functools import lru_cache
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

from topo_env.engine.config_checks import ConfigError, read_text_file
from topo_env.engine.user_files import write_text_atomically

# MMLU-Pro's 14 categories and their question counts in the 12,032-item test set (Wang et al.,
# arXiv 2406.01574). Offsets follow the paper's per-category results: law and engineering are the
# hardest categories for every model, biology, psychology and economics the easiest (logit offsets
# of roughly GPT-4o's per-category accuracy around its mean; a modelling choice within that shape).
# Verifiability: +1 where a shown derivation can be checked step by step (maths, physics, chemistry,
# computing: Du et al. arXiv 2305.14325 report debate gains on arithmetic and GSM8K), -1 where
# persuasive wrong answers exist (law, philosophy, history, psychology, health: the harmful
# conformity of "Not All Flips Are Conformity", arXiv 2606.00820). The magnitudes are not pinned.
MMLU_PRO_SUBJECTS = (
    # name, test-set count, offset, verifiability
    ("math", 1351, 0.20, 0.9),
    ("physics", 1299, 0.10, 0.8),
    ("chemistry", 1132, 0.05, 0.7),
    ("law", 1101, -0.95, -0.9),
    ("engineering", 969, -0.75, 0.4),
    ("other", 924, -0.05, -0.3),
    ("economics", 844, 0.40, 0.2),
    ("health", 818, 0.00, -0.6),
    ("psychology", 798, 0.40, -0.7),
    ("business", 789, 0.30, 0.6),
    ("biology", 717, 0.75, -0.2),
    ("philosophy", 499, -0.35, -1.0),
    ("computer science", 410, 0.20, 0.6),
    ("history", 381, -0.30, -0.8),
)
# AIME / HMMT subject areas (the competitions' own: algebra, combinatorics, geometry, number
# theory); counting arguments and geometry configurations are where a persuasive wrong count
# survives, algebra and number theory where a substituted value checks. Counts: equal shares.
AIME_SUBJECTS = (
    ("algebra", 1, 0.30, 0.8),
    ("combinatorics", 1, -0.30, -0.6),
    ("geometry", 1, -0.20, -0.3),
    ("number theory", 1, 0.20, 0.7),
)
HMMT_SUBJECTS = (
    ("algebra and number theory", 1, 0.25, 0.8),
    ("combinatorics", 1, -0.30, -0.6),
    ("geometry", 1, -0.10, -0.3),
)
# HumanEval's problem kinds (string manipulation, list processing, arithmetic, control logic):
# edge-case-heavy string and logic tasks are where a plausible wrong program survives review.
HUMANEVAL_SUBJECTS = (
    ("string manipulation", 55, -0.10, -0.5),
    ("list processing", 50, 0.15, 0.3),
    ("arithmetic", 35, 0.20, 0.7),
    ("control logic", 24, -0.25, -0.6),
)
# LiveCodeBench's sources and problem kinds: LeetCode (functional: many example tests checkable),
# AtCoder and Codeforces (stdin: a few samples; Codeforces' hidden corner cases survive them).
LIVECODEBENCH_SUBJECTS = (
    ("leetcode functional", 45, 0.20, 0.7),
    ("atcoder stdin", 35, 0.00, 0.0),
    ("codeforces stdin", 20, -0.30, -0.8),
)


@dataclass(frozen=True)
class AgentModel:
    """One LLM, or one persona of an LLM, as the simulated team sees it.

    ``skill(subject)`` = ``ability + spread * g(name, subject)`` with ``g`` a fixed standard normal
    draw per (model name, subject name): the same name always has the same strengths. Personas of one
    model differ by about 0.3 logits per subject; different models by 0.5-1.0 (ReConcile, arXiv
    2309.13007; X-MAS, arXiv 2505.16997; DyLAN's agent-importance scores, arXiv 2310.02170).
    ``verbosity`` scales the model's reasoning tokens."""

    name: str
    ability: float = 0.0
    spread: float = 0.3
    verbosity: float = 1.0
    skills: tuple[tuple[str, float], ...] = ()  # explicit (subject, offset) pairs, e.g. fitted; override the draw

    def skill(self, subject: str) -> float:
        for name, offset in self.skills:
            if name == subject:
                return self.ability + float(offset)
        return self.ability + self.spread * random.Random(f"{self.name}/{subject}").gauss(0.0, 1.0)


MODELS: dict[str, AgentModel] = {
    m.name: m
    for m in (
        AgentModel("gpt-oss-120b/persona-a", 0.0, 0.3),
        AgentModel("gpt-oss-120b/persona-b", 0.0, 0.3),
        AgentModel("gpt-oss-120b/persona-c", 0.0, 0.3),
        AgentModel("gpt-oss-120b", 0.0, 0.5),
        AgentModel("qwen3-32b", -0.25, 0.9, verbosity=1.2),
        AgentModel("llama-3.3-70b", -0.35, 0.9, verbosity=0.8),
    )
}
PERSONA_TEAM = ("gpt-oss-120b/persona-a", "gpt-oss-120b/persona-b", "gpt-oss-120b/persona-c")
MIXED_TEAM = ("gpt-oss-120b", "qwen3-32b", "llama-3.3-70b")


def get_model(spec) -> AgentModel:
    """An :class:`AgentModel` from a name in :data:`MODELS` or a mapping of its fields."""
    if isinstance(spec, AgentModel):
        return spec
    if isinstance(spec, str):
        try:
            return MODELS[spec]
        except KeyError:
            raise ValueError(f"unknown agent model {spec!r}; known models: {sorted(MODELS)} "
                             "(or give {name, ability, spread, verbosity})") from None
    if isinstance(spec, dict):
        known = set(AgentModel.__dataclass_fields__)
        bad = sorted(set(spec) - known)
        if bad or "name" not in spec:
            raise ValueError(f"agent model {spec!r}: needs 'name' and only the keys {sorted(known)}")
        values = dict(spec)
        for key in ("ability", "spread", "verbosity"):
            if key in values:
                values[key] = _number(values[key], f"agent model {spec['name']!r} {key}")
        skills = values.get("skills", ())
        if isinstance(skills, dict):
            skills = skills.items()
        values["skills"] = tuple((str(s), _number(x, f"agent model {spec['name']!r} skill of {s!r}")) for s, x in skills)
        return AgentModel(**values)
    raise ValueError(f"agent model {spec!r}: give a model name or a mapping with its fields")


@dataclass(frozen=True)
class SimProfile:
    """Parameters of the simulated team for one benchmark. See :mod:`topo_env.sim.model`."""

    name: str
    domain: str
    # subjects: (name, relative frequency, logit offset b_s, verifiability v_s in [-1, 1])
    subjects: tuple[tuple[str, float, float, float], ...]
    # targets (Table 1, GPT-OSS:120B), used by the calibration and its test (None: no target)
    base_accuracy: float | None = None
    debate_accuracy: float | None = None
    # default team: agent i is MODELS[team[i % len(team)]]
    team: tuple[str, ...] = PERSONA_TEAM
    # task distribution: difficulty d ~ Beta(diff_a, diff_b)
    diff_a: float = 1.3
    diff_b: float = 1.3
    # answers: label 0 correct, label 1 the trap, labels 2..n_wrong other wrong answers (Zipf)
    n_wrong: int = 9
    wrong_zipf: float = 1.2
    # P(trap | wrong attempt) = min(1, trap_base + trap_slope * d): harder tasks fail the same way
    trap_base: float = 0.54
    trap_slope: float = 0.49
    # solving: eta = alpha + b_s + skill_is + role - beta (d - 1/2) + task_spread z + blind_spread u_i
    alpha: float = 0.0
    beta: float = 8.0
    task_spread: float = 1.5
    blind_spread: float = 0.5
    # updating: weights of the agent's own answer (fresh attempt vs committed) and of peers
    w_fresh: float = 0.15
    w_commit: float = 1.3
    w_peer: float = 0.15
    # recognition of a shown right answer: max(0, rho + rho_v v_s) (1 - rho_d d) + skill_is
    rho: float = 0.45
    rho_v: float = 1.5
    rho_d: float = 0.25
    # pull of a shown trap: max(0, theta - theta_v v_s) d
    theta: float = 0.32
    theta_v: float = 1.3
    tau: float = 0.2  # Gumbel noise scale on answer scores
    # self-revision without new inputs (Huang et al.): correct -> trap, wrong -> correct
    drift_cw: float = 0.04
    drift_wc: float = 0.08
    # after the agent's own answer failed verification it re-solves with this ability bonus
    debug_gain: float = 0.6
    # confidence: sigmoid(mu_correct|mu_wrong + kappa (support - 1/2) + sigma_conf z)
    mu_correct: float = 1.0
    mu_wrong: float = 0.6
    sigma_conf: float = 0.8
    kappa: float = 1.0
    # decision node: weighted vote; an agent that failed verification or that a passed agent
    # contradicts counts with these factors
    decide_tau: float = 0.1
    contradicted_weight: float = 0.3
    # a small model's slips (topo_env.sim.model, step 6b; 0 in every built-in profile, fitted from traces):
    # a revised committed answer, or the decision, replaced by an answer nobody proposed; no readable answer
    p_invent: float = 0.0
    p_invent_decide: float = 0.0
    p_unreadable: float = 0.0
    p_unreadable_decide: float = 0.0
    # verifier used by execute_verify: "tests" (code), "python" (math, when code was written), None
    verifier: str | None = None
    p_wrote_code: float = 1.0
    verify_pass_correct: float = 0.97
    verify_detect: float = 0.75
    verdict_pass_weight: float = 1.6
    verdict_fail_weight: float = 0.25
    # tokens
    sys_tokens: int = 150
    task_tokens_mean: float = 250.0
    header_tokens: int = 15
    verdict_tokens: int = 40
    content_mean: float = 200.0
    reason_mean: float = 800.0
    revisit: float = 0.45  # reasoning factor when revising with new inputs
    reemit: float = 0.05  # reasoning factor when nothing new was shown (the answer is re-emitted)
    conflict: float = 0.8  # extra reasoning factor per share of inputs that disagree
    decide_factor: float = 0.15
    # role modifiers: (alpha offset, recognition factor, content factor)
    roles: dict = field(
        default_factory=lambda: {
            "specialist": (0.0, 1.0, 1.0),
            "analyzer": (-0.4, 1.3, 0.8),
            "decider": (0.0, 1.0, 0.6),
        }
    )
    # cues in the task text: share of cue words drawn from the true subject / difficulty bucket
    subject_cue_fidelity: float = 0.7
    subject_cue_words: int = 3
    difficulty_cue_fidelity: float = 0.3
    difficulty_cue_words: int = 4
    # tasks are drawn as those of the profile called task_set (None: this profile's own name)
    task_set: str | None = None
    # where the profile came from: None for a built-in one, else the path of its YAML file
    source: str | None = None

    @property
    def subject_names(self) -> tuple[str, ...]:
        return tuple(s[0] for s in self.subjects)

    @property
    def subject_probs(self) -> tuple[float, ...]:
        total = float(sum(s[1] for s in self.subjects))
        return tuple(s[1] / total for s in self.subjects)

    @property
    def subject_offsets(self) -> tuple[float, ...]:
        return tuple(float(s[2]) for s in self.subjects)

    @property
    def verifiability(self) -> tuple[float, ...]:
        return tuple(float(s[3]) for s in self.subjects)

    def team_models(self, n_agents: int, team: tuple | None = None) -> tuple[AgentModel, ...]:
        """The N agents' models: ``team`` (names or field mappings) or the profile's, cycled."""
        names = self.team if team is None else tuple(team)
        if not names:
            raise ValueError("team is empty: list one agent model per agent (or fewer, cycled)")
        models = [get_model(m) for m in names]
        return tuple(models[i % len(models)] for i in range(n_agents))

    def skills(self, n_agents: int, team: tuple | None = None) -> list[list[float]]:
        """(N, S) per-agent, per-subject skill offsets (logits) of the team."""
        return [[m.skill(s) for s in self.subject_names] for m in self.team_models(n_agents, team)]


def _reasoning(**kw) -> dict:
    return dict(domain="reasoning", n_wrong=9, verifier=None, sys_tokens=120, task_tokens_mean=250.0,
                content_mean=150.0, reason_mean=800.0, subjects=MMLU_PRO_SUBJECTS, **kw)


def _code(**kw) -> dict:
    return dict(domain="code", n_wrong=4, verifier="tests", sys_tokens=150, task_tokens_mean=300.0,
                content_mean=250.0, reason_mean=750.0, **kw)


def _math(**kw) -> dict:
    kw.setdefault("subjects", AIME_SUBJECTS)
    return dict(domain="math", n_wrong=6, verifier="python", p_wrote_code=0.5, verify_pass_correct=0.95,
                verify_detect=0.6, sys_tokens=150, task_tokens_mean=200.0, content_mean=200.0,
                reason_mean=900.0, diff_a=2.2, diff_b=1.0, **kw)


# alpha / rho / theta below come from `python -m topo_env.sim.calibrate --fit` (module docstring).
PROFILES: dict[str, SimProfile] = {
    p.name: p
    for p in (
        SimProfile(name="mmlu_pro", base_accuracy=0.7429, debate_accuracy=0.7857,
                   alpha=2.141, rho=0.0, theta=0.628, **_reasoning()),
        SimProfile(name="mmlu_pro_mixed", team=MIXED_TEAM, task_set="mmlu_pro",
                   alpha=2.141, rho=0.0, theta=0.628, **_reasoning()),
        SimProfile(name="humaneval", base_accuracy=0.9004, debate_accuracy=0.8963, diff_a=0.9, diff_b=2.2,
                   alpha=2.224, rho=0.0, theta=0.908, subjects=HUMANEVAL_SUBJECTS, **_code()),
        SimProfile(name="livecodebench", base_accuracy=0.8875, debate_accuracy=0.9200, diff_a=1.0, diff_b=1.8,
                   alpha=2.329, rho=0.458, theta=0.32, subjects=LIVECODEBENCH_SUBJECTS, **_code()),
        SimProfile(name="aime25", base_accuracy=0.2333, debate_accuracy=0.3000,
                   alpha=-0.957, rho=0.0, theta=1.565, **_math()),
        SimProfile(name="aime26", base_accuracy=0.2000, debate_accuracy=0.3667,
                   alpha=-1.315, rho=0.0, theta=0.56, **_math()),
        SimProfile(name="hmmt25", base_accuracy=0.2667, debate_accuracy=0.3333,
                   alpha=-0.311, rho=0.0, theta=0.826, **_math(subjects=HMMT_SUBJECTS)),
        SimProfile(name="beyond_aime", base_accuracy=0.1800, debate_accuracy=0.2800,
                   alpha=-1.54, rho=0.0, theta=1.454, **_math()),
    )
}


def is_profile_path(name: str) -> bool:
    """Whether ``name`` names a profile file (``*.yaml`` / ``*.yml``) rather than a built-in profile."""
    return isinstance(name, str) and name.endswith((".yaml", ".yml"))


def get_profile(name: str) -> SimProfile:
    """The built-in profile called ``name``, or the profile in YAML file ``name`` (:func:`load_profile`);
    a ValueError names the bad value and the known ones."""
    if is_profile_path(name):
        path = Path(name)
        return _load_cached(str(path), path.stat().st_mtime_ns if path.is_file() else -1)
    try:
        return PROFILES[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown profile {name!r}; known profiles: {sorted(PROFILES)} "
                         "(or the path of a profile YAML file, e.g. from python -m topo_env.fitting.fit)") from None


@lru_cache(maxsize=32)
def _load_cached(path: str, mtime_ns: int) -> SimProfile:
    return load_profile(path)


class ProfileFileError(ConfigError):
    """A profile file is missing, unreadable, truncated or has a bad field; the message names the
    file, line and field."""


WRITTEN_HEADER = "# a topomarl simulated team (topo_env.sim.profiles.save_profile)"
WRITTEN_END = "# end of profile"
"""The first and last lines of a profile file :func:`save_profile` wrote."""
PROFILE_REMEDY = "fix it, or write it again (python -m topo_env.fitting.fit traces.jsonl --out profile.yaml)"


SUBJECT_KEYS = ("name", "weight", "offset", "verifiability")


def profile_to_dict(profile: SimProfile) -> dict:
    """Plain data for a YAML profile file (:func:`save_profile`): every field, subjects and team spelled out."""
    out = {}
    for f in fields(profile):
        if f.name == "source":
            continue
        value = getattr(profile, f.name)
        if f.name == "subjects":
            value = [dict(zip(SUBJECT_KEYS, (s[0], float(s[1]), float(s[2]), float(s[3])))) for s in value]
        elif f.name == "team":  # registry names stay names; other models are spelled out
            value = [m if isinstance(m, str) and m in MODELS else _model_data(get_model(m)) for m in value]
        elif f.name == "roles":
            value = {k: list(v) for k, v in value.items()}
        out[f.name] = value
    return out


def _model_data(model: AgentModel) -> dict:
    """An AgentModel as plain data (``skills`` as a subject -> offset mapping)."""
    return {**asdict(model), "skills": dict(model.skills)}


def save_profile(profile: SimProfile, path) -> None:
    """Write ``profile`` as a YAML file that ``profile: <path>`` loads, atomically, between
    :data:`WRITTEN_HEADER` and :data:`WRITTEN_END` (so that a truncated copy is told from a whole one)."""
    import yaml

    text = yaml.safe_dump(profile_to_dict(profile), sort_keys=False)
    write_text_atomically(path, f"{WRITTEN_HEADER}\n{text}{WRITTEN_END}\n")


def load_profile(path) -> SimProfile:
    """The profile in YAML file ``path``: any :class:`SimProfile` field may be given (``name``, ``domain``
    and ``subjects`` must be); the others keep their defaults. Raises :class:`ProfileFileError` naming
    the file, the line and the field of the first bad entry, or what makes the file unreadable: not
    UTF-8, empty, or truncated (a file :func:`save_profile` wrote without its last line)."""
    import yaml

    path = Path(path)
    if not path.is_file():
        raise ProfileFileError(f"profile file {str(path)!r} does not exist; write one with "
                               "python -m topo_env.fitting.fit traces.jsonl --out profile.yaml")
    text = read_text_file(path, "profile file", PROFILE_REMEDY, ProfileFileError)
    if text.startswith(WRITTEN_HEADER) and text.rstrip().splitlines()[-1] != WRITTEN_END:  # a cut may fall in a value
        raise ProfileFileError(f"{path}: profile file is truncated (written by save_profile, it lacks its last line "
                               f"{WRITTEN_END!r}); {PROFILE_REMEDY}")
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = f"line {mark.line + 1}" if mark is not None else "?"
        why = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ProfileFileError(f"profile file {str(path)!r} {line}: not valid YAML ({why}); {PROFILE_REMEDY}") from None
    lines = {}
    if isinstance(node, yaml.MappingNode):
        lines = {k.value: k.start_mark.line + 1 for k, _ in node.value}

    def bad(key: str, why: str) -> ProfileFileError:
        return ProfileFileError(f"profile file {str(path)!r} line {lines.get(key, 1)}, field {key!r}: {why}")

    if not isinstance(data, dict):
        raise ProfileFileError(f"profile file {str(path)!r} line 1: must hold a mapping of profile fields")
    known = {f.name: f for f in fields(SimProfile) if f.name != "source"}
    for key in data:
        if key not in known:
            raise bad(key, f"unknown field; known fields: {sorted(known)}")
    for key in ("name", "domain", "subjects"):
        if key not in data:
            raise ProfileFileError(f"profile file {str(path)!r}: field {key!r} is missing")
    values = {}
    for key, value in data.items():
        try:
            values[key] = _profile_value(key, value, known[key])
        except ValueError as e:
            raise bad(key, str(e)) from None
    if values["domain"] not in ("math", "code", "reasoning"):
        raise bad("domain", f"{values['domain']!r} is not one of ['code', 'math', 'reasoning']")
    try:
        profile = SimProfile(**values, source=str(path))
        profile.team_models(len(profile.team))
    except (TypeError, ValueError) as e:
        raise bad("team", str(e)) from None
    return profile


def _profile_value(key: str, value, spec):
    """One field of a profile file, checked and converted."""
    default = spec.default
    if key == "subjects":
        if not isinstance(value, list) or not value:
            raise ValueError("must be a non-empty list of {name, weight, offset, verifiability}")
        out = []
        for k, s in enumerate(value):
            if not isinstance(s, dict) or set(s) != set(SUBJECT_KEYS):
                raise ValueError(f"entry {k} must have exactly the keys {list(SUBJECT_KEYS)}, got {s!r}")
            out.append((str(s["name"]), *(_number(s[x], f"entry {k} {x}") for x in SUBJECT_KEYS[1:])))
            if out[-1][1] <= 0:
                raise ValueError(f"entry {k} weight must be > 0, got {s['weight']!r}")
        return tuple(out)
    if key == "team":
        if not isinstance(value, list) or not value:
            raise ValueError("must be a non-empty list of model names or {name, ability, spread, verbosity, skills}")
        return tuple(m if isinstance(m, str) else get_model(m) for m in value)
    if key == "roles":
        if not isinstance(value, dict) or any(not isinstance(v, list) or len(v) != 3 for v in value.values()):
            raise ValueError("must map each role to [alpha offset, recognition factor, content factor]")
        return {str(k): tuple(_number(x, f"{k}") for x in v) for k, v in value.items()}
    if key == "task_set":
        if value is not None and (not isinstance(value, str) or not value):
            raise ValueError(f"must be null or a profile name, got {value!r}")
        return value
    if key in ("name", "domain"):
        if not isinstance(value, str) or not value:
            raise ValueError(f"must be a non-empty string, got {value!r}")
        return value
    if key == "verifier":
        if value not in (None, "tests", "python"):
            raise ValueError(f"must be null, 'tests' or 'python', got {value!r}")
        return value
    if value is None and key in ("base_accuracy", "debate_accuracy"):
        return None
    number = _number(value, key)
    if isinstance(default, int) and not isinstance(default, bool):
        if number != int(number) or number < 0:
            raise ValueError(f"must be a whole number >= 0, got {value!r}")
        return int(number)
    return number


def _number(value, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{what} must be a finite number, got {value!r}")
    return float(value)


def with_overrides(profile: SimProfile, **overrides) -> SimProfile:
    """A copy of ``profile`` with some parameters changed (for studies and calibration)."""
    return replace(profile, **overrides)


def profile_argument(text: str) -> str:
    """argparse type: a built-in profile's name or the path of a profile YAML file (loaded here, so
    a bad file is refused with its line and field)."""
    try:
        get_profile(text)
    except (ValueError, OSError) as err:  # ProfileFileError is a ValueError
        raise argparse.ArgumentTypeError(str(err)) from None
    return text
