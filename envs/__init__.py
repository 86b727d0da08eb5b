"""swebox.envs: RL environments for software-engineering agents (see docs/envs.md).

Importing this package registers the Gymnasium id ``swebox/SWE-v0`` by entry-point string (nothing heavy is
imported until ``gymnasium.make``). ``register_skyrl()`` registers the skyrl-gym id ``swebox``; ``group`` makes
GRPO groups of episodes. Both are imported on first use.
"""

from __future__ import annotations

from typing import Any

GYM_ID = "swebox/SWE-v0"
SKYRL_ID = "swebox"

try:
    import gymnasium as _gymnasium
except ImportError:  # the sandbox and cache work without gymnasium
    _gymnasium = None

# Outputs of real commands vary (timings, pids), so the env is registered as nondeterministic.
if _gymnasium is not None and GYM_ID not in _gymnasium.registry:
    # GradeOnTruncation sits above the TimeLimit that make(max_episode_steps=N) adds, so truncation grades
    _grade_on_truncation = _gymnasium.envs.registration.WrapperSpec(
        name="GradeOnTruncation", entry_point="swebox.envs.gym_env:GradeOnTruncation", kwargs={})
    _gymnasium.register(id=GYM_ID, entry_point="swebox.envs.gym_env:SWEGymEnv", nondeterministic=True,
                        additional_wrappers=(_grade_on_truncation,))


def register_skyrl(env_id: str = SKYRL_ID, **settings: Any) -> bool:
    """Register SWESkyRLEnv in skyrl-gym's registry; a second call is a no-op. See swebox.envs.skyrl_env."""
    from swebox.envs.skyrl_env import register_skyrl as register

    return register(env_id, **settings)


def __getattr__(name: str) -> Any:
    if name in ("group", "EpisodeGroup"):
        from swebox.envs import groups as module

        return getattr(module, name)
    if name in ("SWEEpisode", "EpisodeConfig"):
        from swebox.envs import swe_env

        return getattr(swe_env, name)
    raise AttributeError(f"module 'swebox.envs' has no attribute {name!r}")


__all__ = ["GYM_ID", "SKYRL_ID", "EpisodeConfig", "EpisodeGroup", "SWEEpisode", "group", "register_skyrl"]
