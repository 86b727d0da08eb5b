"""swebox.envs: RL environments for software-engineering agents (see docs/envs.md).

Importing this package registers the Gymnasium ids ``swebox/SWE-v0`` (the text loop) and
``swebox/SWE-Harness-v0`` (the model behind a harness) by entry-point string (nothing heavy is
imported until ``gymnasium.make``). ``register_skyrl()`` registers the skyrl-gym id ``swebox``; ``group`` makes
GRPO groups of episodes. Both are imported on first use.

Gymnasium itself is not imported here: ``import swebox.envs.sandbox`` (or the cache, or the tasks) must load the
standard library only, and gymnasium pulls numpy. The id is registered now when gymnasium is already imported,
else the moment it is (a one-shot import hook), so ``gymnasium.make("swebox/SWE-v0")`` works in either order.
"""

from __future__ import annotations

import sys
from typing import Any

from swebox.envs import old_names

old_names.install()  # modules moved in issue #30 keep their old names (swebox.envs.old_names)

GYM_ID = "swebox/SWE-v0"
HARNESS_GYM_ID = "swebox/SWE-Harness-v0"
SKYRL_ID = "swebox"


def _register_gymnasium(gymnasium: Any) -> None:
    # Outputs of real commands vary (timings, pids), so the env is registered as nondeterministic.
    # GradeOnTruncation sits above the TimeLimit that make(max_episode_steps=N) adds, so truncation grades.
    grade_on_truncation = gymnasium.envs.registration.WrapperSpec(
        name="GradeOnTruncation", entry_point="swebox.envs.frameworks.gym_env:GradeOnTruncation", kwargs={}
    )
    for env_id, entry_point in (
        (GYM_ID, "swebox.envs.frameworks.gym_env:SWEGymEnv"),
        (HARNESS_GYM_ID, "swebox.envs.frameworks.harness_gym_env:SWEHarnessGymEnv"),
    ):
        if env_id not in gymnasium.registry:
            gymnasium.register(
                id=env_id, entry_point=entry_point, nondeterministic=True, additional_wrappers=(grade_on_truncation,)
            )


class _WhenGymnasiumLoads:
    """A meta-path finder that lets the normal finders load gymnasium, then registers the id once."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != "gymnasium":
            return None
        import importlib.util

        sys.meta_path.remove(self)  # one shot; also keeps find_spec below from finding us again
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        run_module = spec.loader.exec_module

        def exec_module(module: Any) -> None:
            run_module(module)
            _register_gymnasium(module)

        # wrap this one loader's exec_module (mypy refuses any assignment to a method, even on an instance)
        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


if "gymnasium" in sys.modules:
    _register_gymnasium(sys.modules["gymnasium"])
elif not any(isinstance(f, _WhenGymnasiumLoads) for f in sys.meta_path):
    sys.meta_path.insert(0, _WhenGymnasiumLoads())


def register_skyrl(env_id: str = SKYRL_ID, **settings: Any) -> bool:
    """Register SWESkyRLEnv in skyrl-gym's registry; a second call is a no-op. See swebox.envs.frameworks.skyrl_env."""
    from swebox.envs.frameworks.skyrl_env import register_skyrl as register

    return register(env_id, **settings)


def __getattr__(name: str) -> Any:
    if name in ("group", "EpisodeGroup"):
        from swebox.envs.episodes import groups as module

        return getattr(module, name)
    if name in ("SWEEpisode", "EpisodeConfig"):
        from swebox.envs.episodes import episode as swe_env

        return getattr(swe_env, name)
    raise AttributeError(f"module 'swebox.envs' has no attribute {name!r}")


__all__ = [
    "GYM_ID",
    "HARNESS_GYM_ID",
    "SKYRL_ID",
    "EpisodeConfig",
    "EpisodeGroup",
    "SWEEpisode",
    "group",
    "register_skyrl",
]
