"""SkyRL's training entrypoint with the swebox environment registered: ``python -m swebox.trainers.skyrl_entry
<SkyRL config overrides>`` in place of ``python -m skyrl.train.entrypoints.main_base``.

SkyRL builds its envs inside a Ray task (``skyrl_entrypoint``) and its generator's workers, so registering
``swebox`` in the driver process is not enough: the registration happens inside the Ray entrypoint task, as
SkyRL's own examples do (examples/train/multiply/main_multiply.py). Importing this module in a worker (Ray
imports it to run the task) registers too.

Environment settings (EpisodeConfig fields plus ``layers``, a LayerSource dict), later ones winning:
``$SWEBOX_SKYRL_SETTINGS`` (a JSON object; registered kwargs, any SkyRL), then on skyrl >= 0.4 the config keys
``environment.skyrl_gym.swebox.<name>`` (SkyRL's strict config accepts them through the subclass in
:mod:`swebox.trainers.skyrl_config`; the generator hands that section to the env as its ``env_config``), then
the per-row settings written by ``swebox skyrl prepare``. All of them are checked here, before Ray starts.

skyrl (the trainer package) is imported only when training starts; it supports both layouts:
``skyrl.train.*`` (skyrl 0.3 and 0.4, tested with 0.4.0) and ``skyrl_train.*`` (older releases). Building the
config needs only SkyRL's config module; checking it (``validate_cfg``) and training need its whole trainer.
"""

from __future__ import annotations

import json
import os
import sys
import typing
from types import ModuleType
from typing import Any

SETTINGS_ENV = "SWEBOX_SKYRL_SETTINGS"


def settings_from_environment(environ: dict[str, str] | None = None) -> dict[str, Any]:
    """The env settings from $SWEBOX_SKYRL_SETTINGS ({} when unset); a clear error on bad JSON."""
    raw = (environ if environ is not None else os.environ).get(SETTINGS_ENV, "").strip()
    if not raw:
        return {}
    try:
        settings = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ValueError(
            f"${SETTINGS_ENV}: expected a JSON object such as '{{\"max_turns\": 30}}'; found "
            f"invalid JSON ({exc.msg} at column {exc.colno})."
        ) from None
    if not isinstance(settings, dict):
        raise ValueError(f"${SETTINGS_ENV}: expected a JSON object; found {type(settings).__name__}.")
    return settings


def register(environ: dict[str, str] | None = None) -> bool:
    """Register the ``swebox`` skyrl-gym env with the settings from the environment (idempotent)."""
    from swebox.envs import register_skyrl

    return register_skyrl(**settings_from_environment(environ))


def _patch_typed_dict() -> None:
    # skyrl 0.3 on Python 3.11: pydantic needs typing_extensions' TypedDict (a quirk of skyrl itself)
    import typing_extensions

    typing.TypedDict = typing_extensions.TypedDict  # type: ignore[misc]


def _import_first(*names: str) -> ModuleType:
    import importlib

    _patch_typed_dict()
    errors = []
    for name in names:
        try:
            return importlib.import_module(name)
        except ImportError as exc:
            errors.append(f"{name}: {exc}")
    raise ImportError(
        "SkyRL's trainer is not installed (`pip install skyrl[fsdp]` on the training cluster, see "
        "configs/skyrl/run_swebox_grpo.sh); tried " + "; ".join(errors)
    )


def skyrl_config_module() -> ModuleType:
    """SkyRL's config module (new layout first); all that building a config needs."""
    return _import_first("skyrl.train.config", "skyrl_train.config")


def skyrl_modules() -> tuple[ModuleType, ModuleType, ModuleType]:
    """(config module, main_base module, utils module) of the installed SkyRL, new layout first."""
    config = skyrl_config_module()
    prefix = config.__name__.rsplit(".", 1)[0]
    return config, _import_first(f"{prefix}.entrypoints.main_base"), _import_first(f"{prefix}.utils")


def config_class(config_module: ModuleType) -> Any:
    """swebox's subclass of SkyRL's root config where SkyRL has the 0.4 classes, else SkyRL's own class."""
    if config_module.__name__ == "skyrl.train.config" and hasattr(config_module, "SkyRLGymConfig"):
        try:
            from swebox.trainers.skyrl_config import SweboxSkyRLConfig

            return SweboxSkyRLConfig
        except (ImportError, TypeError):  # an older skyrl.train whose classes do not subclass this way
            pass
    return _config_class(config_module)


def build_config(argv: list[str]) -> Any:
    """SkyRL's config from its CLI overrides, and swebox's settings (environment and config) checked."""
    settings = settings_from_environment()
    try:
        cfg = config_class(skyrl_config_module()).from_cli_overrides(argv)
    except ImportError:
        raise
    except Exception as exc:  # SkyRL's own words about an override; the traceback would bury them
        raise ValueError(f"SkyRL's config: {type(exc).__name__}: {exc}") from exc
    section = dict(getattr(cfg.environment.skyrl_gym, "swebox", None) or {})
    from swebox.envs.frameworks.skyrl_env import split_settings

    try:
        split_settings({**settings, **section})
    except ValueError as exc:
        where = "environment.skyrl_gym.swebox" if section else f"${SETTINGS_ENV}"
        raise ValueError(f"{where}: {exc}") from None
    return cfg


def _config_class(config_module: ModuleType) -> Any:
    for name in ("SkyRLTrainConfig", "SkyRLConfig"):
        if hasattr(config_module, name):
            return getattr(config_module, name)
    raise ImportError(f"{config_module.__name__} has neither SkyRLTrainConfig nor SkyRLConfig")


def _entrypoint_task():
    import ray

    @ray.remote(num_cpus=1)
    def skyrl_entrypoint(cfg: Any, environ: dict[str, str]) -> None:
        # inside the Ray task: this process builds the generator, whose env workers live here
        os.environ.update(environ)
        register(environ)
        _, main_base, _ = skyrl_modules()
        main_base.BasePPOExp(cfg).run()

    return skyrl_entrypoint


def main(argv: list[str] | None = None) -> None:
    """Parse SkyRL's CLI overrides, validate, start Ray and run the trainer with ``swebox`` registered."""
    import ray

    argv = list(sys.argv[1:] if argv is None else argv)
    cfg = build_config(argv)  # fails here, not in a Ray worker, on a bad override or env setting
    register()
    _, main_base, utils = skyrl_modules()
    try:
        main_base.validate_cfg(cfg)
    except Exception as exc:
        raise ValueError(f"SkyRL's config: {type(exc).__name__}: {exc}") from exc
    utils.initialize_ray(cfg)
    forwarded = {k: v for k, v in os.environ.items() if k.startswith("SWEBOX_")}
    ray.get(_entrypoint_task().remote(cfg, forwarded))


def cli(argv: list[str] | None = None) -> int:
    """``python -m swebox.trainers.skyrl_entry``: a mistake before training (bad $SWEBOX_SKYRL_SETTINGS, SkyRL not
    installed, a wrong override) is one line and exit status 2; ``SWEBOX_DEBUG=1`` shows the traceback."""
    try:
        main(argv)
    except (ValueError, ImportError) as exc:
        if os.environ.get("SWEBOX_DEBUG", "") not in ("", "0"):
            raise
        text = "; ".join(line.strip() for line in str(exc).splitlines() if line.strip())
        print(
            f"python -m swebox.trainers.skyrl_entry: error: {text} [SWEBOX_DEBUG=1 shows the traceback]",
            file=sys.stderr,
        )
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(cli())
