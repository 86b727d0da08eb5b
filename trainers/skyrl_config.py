"""SkyRL 0.4's root config with swebox's env settings as config keys: ``environment.skyrl_gym.swebox.<name>``.

SkyRL 0.4 builds its config strictly from dataclasses (an unknown key is an error) and asks integrations that
need keys of their own to subclass its config dataclasses. Its generator hands
``getattr(cfg.environment.skyrl_gym, env_class, {})`` to ``skyrl_gym.make`` as ``env_config``, so a field named
``swebox`` on ``SkyRLGymConfig`` is exactly what reaches ``SWESkyRLEnv`` for ``environment.env_class=swebox``.
The field is a plain dict (SkyRL passes dicts through as they are); ``skyrl_entry`` checks its keys against
EpisodeConfig before Ray starts, so a misspelt option fails in one line, not in every rollout.

This module imports SkyRL's config classes at import time: import it only where skyrl >= 0.4 is installed
(``skyrl_entry`` falls back to SkyRL's own class, and to ``$SWEBOX_SKYRL_SETTINGS``, where it is not).
No ``from __future__ import annotations``: SkyRL's config builder reads the field types as objects.
"""

from dataclasses import dataclass, field
from typing import Any

from skyrl.train.config import EnvironmentConfig, SkyRLGymConfig, SkyRLTrainConfig

ENV_CLASS = "swebox"


@dataclass
class SweboxGymConfig(SkyRLGymConfig):
    """SkyRL's ``environment.skyrl_gym`` with one more section, ``swebox``."""

    swebox: dict = field(default_factory=dict)
    """swebox's env settings: EpisodeConfig fields (``max_turns``, ``command_timeout_s``, ...) and ``layers``
    (a LayerSource dict); the env's ``env_config``. Per-row settings from ``swebox skyrl prepare`` win."""


@dataclass
class SweboxEnvironmentConfig(EnvironmentConfig):
    """SkyRL's ``environment`` section, defaulting to the swebox env."""

    env_class: str = ENV_CLASS
    """The skyrl-gym id the generator builds envs by (``register_skyrl`` registers ``swebox``)."""
    skyrl_gym: SweboxGymConfig = field(default_factory=SweboxGymConfig)
    """skyrl-gym's settings, with the ``swebox`` section."""


@dataclass
class SweboxSkyRLConfig(SkyRLTrainConfig):
    """``SkyRLTrainConfig`` whose ``environment.skyrl_gym`` accepts ``swebox.*`` keys."""

    environment: SweboxEnvironmentConfig = field(default_factory=SweboxEnvironmentConfig)
    """The environment section (env class and skyrl-gym settings)."""


def swebox_settings(cfg: Any) -> dict[str, Any]:
    """The ``environment.skyrl_gym.swebox`` section of a built config ({} for a config without it)."""
    return dict(getattr(cfg.environment.skyrl_gym, ENV_CLASS, None) or {})
