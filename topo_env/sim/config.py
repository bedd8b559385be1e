"""The simulated backend's config: ``env.backend: sim`` or ``{kind: sim, profile: ..., team: ...}``.

``profile``: a built-in profile's name (:data:`topo_env.sim.profiles.PROFILES`) or the path of a
profile YAML file (e.g. written by ``python -m topo_env.fitting.fit``). ``team``: the agents'
models, one per agent (cycled if shorter): names from :data:`topo_env.sim.profiles.MODELS` or
mappings ``{name, ability, spread, verbosity}``; None: the profile's own team. The env section may
also give both at its top level (``env.profile``, ``env.team``: the short spelling, nested here).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from topo_env.engine.backend_registry import BATCH_SIMULATOR, NAMED_PROFILE
from topo_env.engine.config_checks import ConfigError, as_tuple
from topo_env.sim.profiles import PROFILES, get_model, get_profile, is_profile_path

if TYPE_CHECKING:
    from topo_env.engine.team_backend import TeamSettings

SIM_KEYS: tuple[str, ...] = ("profile", "team")
"""The keys an env section may give at its top level for the simulated team."""


@dataclass(frozen=True)
class SimBackendConfig:
    """The calibrated simulated team of ``profile`` (no network, no keys)."""

    kind: str = "sim"
    profile: str = "mmlu_pro"
    team: tuple | None = None
    capabilities: ClassVar[frozenset[str]] = frozenset({BATCH_SIMULATOR, NAMED_PROFILE})

    @property
    def label(self) -> str:
        """What names the team in run folders and tables: its profile."""
        return self.profile

    def __post_init__(self) -> None:
        if is_profile_path(self.profile):
            try:
                get_profile(self.profile)
            except ValueError as e:
                raise ConfigError(f"profile={self.profile!r}: {e}") from None
        elif self.profile not in PROFILES:
            raise ConfigError(f"profile={self.profile!r}: must be one of {list(PROFILES)} or the path of a profile "
                              "YAML file")
        if self.team is not None:
            try:  # names stay names; mappings become (hashable) AgentModels
                team = tuple(m if isinstance(m, str) else get_model(m) for m in as_tuple("team", self.team))
            except ValueError as e:
                raise ConfigError(f"team: {e}") from None
            object.__setattr__(self, "team", team)

    @property
    def domain(self) -> str:
        """The profile's domain."""
        return get_profile(self.profile).domain

    def check(self, env: TeamSettings) -> None:
        """``env.domain``, when given, must be the profile's domain; ``team`` must fit the profile
        and ``env.n_agents``."""
        profile = get_profile(self.profile)
        if env.domain is not None and env.domain != profile.domain:
            raise ConfigError(f"domain={env.domain!r} does not match profile {self.profile!r} (domain "
                              f"{profile.domain!r}); leave domain out with backend kind 'sim'")
        if self.team is not None:
            try:
                profile.team_models(env.n_agents, self.team)
            except ValueError as e:
                raise ConfigError(f"team: {e}") from None
