"""The simulated backend's config: ``env.backend: sim`` (or ``{kind: sim}``)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from topo_env.engine.config_checks import ConfigError
from topo_env.sim.profiles import get_profile

if TYPE_CHECKING:
    from topo_env.frontends.env_config import EnvConfig


@dataclass(frozen=True)
class SimBackendConfig:
    """``backend: sim``: the calibrated simulated team of ``env.profile`` (no network, no keys)."""

    kind: str = "sim"

    def check(self, env: EnvConfig) -> None:
        """``env.domain``, when given, must be the profile's domain."""
        profile = get_profile(env.profile)
        if env.domain is not None and env.domain != profile.domain:
            raise ConfigError(f"domain={env.domain!r} does not match profile {env.profile!r} (domain "
                              f"{profile.domain!r}); leave domain out with backend kind 'sim'")
