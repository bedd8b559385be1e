"""What a fit returns: :class:`Fitted` (the fitted profile, its report, the parsed traces) and the
:class:`ProfileBuilder` that turns parameter values into a profile.

Contract
--------
``ProfileBuilder(base, data, am, verifier, verifiability, shrink).build({name: value})`` is the profile the
values describe, for the names of the report's rows (scalar fields of
:class:`~topo_env.sim.profiles.SimProfile`, ``subject_offset[s]``, ``verifiability[s]``, ``skill_dev[i,s]``,
``verbosity[i]``); a name without a value keeps the base's (or the fit's kept) value. Skill deviations are
shrunk by ``shrink`` (:class:`~topo_env.fitting.fit_ability.Shrinkage`) and the last agent's is minus the
others' sum; the team's AgentModels carry the
skills explicitly; the profile is named ``<base>-fit``. The fit writes ``build(report.estimated())``; the
predictive check (:mod:`topo_env.fitting.fit_check`) builds profiles from draws of the estimates.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from topo_env.fitting.fit_ability import AttemptModel, Shrinkage, padded_skills
from topo_env.fitting.fit_data import Data
from topo_env.fitting.fit_updates import UpdateFit, UpdateModel
from topo_env.sim.profiles import AgentModel, SimProfile


class ProfileBuilder:
    """Makes the profile a set of parameter values describes: ``build({name: value})`` for the names of
    the report's rows (scalar fields, ``subject_offset[s]``, ``verifiability[s]``, ``skill_dev[i,s]``);
    what a value is not given for keeps the base's (or the fit's kept) value. The fit writes
    ``build(report.estimated())``; the predictive check builds profiles from draws of the estimates."""

    def __init__(self, base: SimProfile, data: Data, am: AttemptModel | None, verifier: str | None,
                 verifiability: list[float], shrink: Shrinkage | None = None):
        self.base, self.subjects, self.n_agents = base, list(data.subjects), data.n_agents
        self.shrink = shrink
        self.verifier, self.verifiability = verifier, list(verifiability)
        if am is not None:
            self.kbar, self.dev = am.kbar, am.base_dev.copy()
            self.dev[:, am.dev_subjects] = 0.0
        else:
            skills = padded_skills(base, data)
            self.kbar, self.dev = skills.mean(axis=0), skills - skills.mean(axis=0)
        self.mean_weight = float(np.mean([s[1] for s in base.subjects]))

    def skills(self, values: dict[str, float]) -> np.ndarray:
        """(N, S) k_is: the base team's average skill per subject plus the deviations shrunk as the fit's
        shrinkage says (the last agent's is minus the others' sum on every subject with fitted deviations)."""
        dev = self.dev.copy()
        for s, subject in enumerate(self.subjects):
            for i in range(self.n_agents - 1):
                x = values.get(f"skill_dev[{i},{subject}]")
                if x is not None:
                    dev[i, s] = x
                    dev[-1, s] -= x
        return self.kbar[None, :] + (dev if self.shrink is None else self.shrink.apply(dev))

    def build(self, values: dict[str, float]) -> SimProfile:
        """The profile ``values`` describe (the base's values for the names without one)."""
        base = self.base
        subjects = []
        for s, name in enumerate(self.subjects):
            known = s < len(base.subjects)
            weight = base.subjects[s][1] if known else self.mean_weight
            offset = values.get(f"subject_offset[{name}]", base.subjects[s][2] if known else 0.0)
            v = values.get(f"verifiability[{name}]", self.verifiability[s])
            subjects.append((name, float(weight), float(offset), float(v)))
        skills = self.skills(values)
        team = []
        for i, m in enumerate(base.team_models(self.n_agents)):
            ability = float(m.ability)
            team.append(AgentModel(name=f"{m.name}/fit-{i}", ability=ability, spread=float(m.spread),
                                   verbosity=float(values.get(f"verbosity[{i}]", m.verbosity)),
                                   skills=tuple((name, float(skills[i, s] - ability)) for s, name in enumerate(self.subjects))))
        scalars = {}
        for name, v in values.items():
            if hasattr(base, name) and name not in ("subjects", "team"):
                scalars[name] = max(0, int(round(v))) if isinstance(getattr(base, name), int) else float(v)
        return replace(base, **scalars, name=f"{base.name}-fit", task_set=base.task_set or base.name,
                       subjects=tuple(subjects), team=tuple(team), verifier=self.verifier, source=None)


@dataclass
class Fitted:
    """Everything :func:`topo_env.fitting.fit.fit_records` computed: the profile, the report, the parsed
    traces and the builder of profiles from parameter values (for the predictive check)."""

    profile: SimProfile
    report: dict
    data: Data
    builder: ProfileBuilder
    records: list[dict]
    updates: tuple[UpdateModel, UpdateFit] | None = None  # the update calls' likelihood and its maximum
