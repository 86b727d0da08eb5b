"""SkyRL's training entrypoint with the swebox environment registered: ``python -m swebox.trainers.skyrl_entry
<SkyRL config overrides>`` in place of ``python -m skyrl.train.entrypoints.main_base``.

SkyRL builds its envs inside a Ray task (``skyrl_entrypoint``) and its generator's workers, so registering
``swebox`` in the driver process is not enough: the registration happens inside the Ray entrypoint task, as
SkyRL's own examples do (examples/train/multiply/main_multiply.py). Importing this module in a worker (Ray
imports it to run the task) registers too. Environment settings come from ``SWEBOX_SKYRL_SETTINGS`` (a JSON
object of EpisodeConfig fields plus ``layers``, a LayerSource dict) because SkyRL's strict config rejects
unknown ``environment.skyrl_gym.*`` keys; per-row settings written by ``swebox skyrl prepare`` win over it.

skyrl (the trainer package) is imported only when training starts; it supports both layouts:
``skyrl.train.*`` (skyrl >= 0.3) and ``skyrl_train.*`` (older releases).
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
        raise ValueError(f"${SETTINGS_ENV}: expected a JSON object such as '{{\"max_turns\": 30}}'; found "
                         f"invalid JSON ({exc.msg} at column {exc.colno}).") from None
    if not isinstance(settings, dict):
        raise ValueError(f"${SETTINGS_ENV}: expected a JSON object; found {type(settings).__name__}.")
    return settings


def register(environ: dict[str, str] | None = None) -> bool:
    """Register the ``swebox`` skyrl-gym env with the settings from the environment (idempotent)."""
    from swebox.envs import register_skyrl

    return register_skyrl(**settings_from_environment(environ))


def skyrl_modules() -> tuple[ModuleType, ModuleType, ModuleType]:
    """(config module, main_base module, utils module) of the installed SkyRL, new layout first."""
    # skyrl 0.3 on Python 3.11: pydantic needs typing_extensions' TypedDict (a quirk of skyrl itself)
    import typing_extensions

    typing.TypedDict = typing_extensions.TypedDict  # type: ignore[misc]
    import importlib

    errors = []
    for prefix in ("skyrl.train", "skyrl_train"):
        try:
            return (importlib.import_module(f"{prefix}.config"),
                    importlib.import_module(f"{prefix}.entrypoints.main_base"),
                    importlib.import_module(f"{prefix}.utils"))
        except ImportError as exc:
            errors.append(f"{prefix}: {exc}")
    raise ImportError("SkyRL's trainer is not installed (`pip install skyrl[fsdp]` on the training cluster, see "
                      "configs/skyrl/run_swebox_grpo.sh); tried " + "; ".join(errors))


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
    settings_from_environment()  # fail here, not in a Ray worker, on bad settings
    register()
    config_module, main_base, utils = skyrl_modules()
    try:
        cfg = _config_class(config_module).from_cli_overrides(argv)
        main_base.validate_cfg(cfg)
    except Exception as exc:  # SkyRL's own words about an override; the traceback would bury them
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
        print(f"python -m swebox.trainers.skyrl_entry: error: {text} [SWEBOX_DEBUG=1 shows the traceback]",
              file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(cli())
