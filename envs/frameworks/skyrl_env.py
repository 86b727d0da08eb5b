"""The SkyRL face of swebox: ``SWESkyRLEnv``, a skyrl-gym ``BaseTextEnv`` registered as ``swebox``.

SkyRL's generator builds one env per trajectory with ``skyrl_gym.make(env_class, env_config=...,
extras=row)``, where ``row`` is the dataset row minus ``prompt`` and ``env_class``. What it does around an
env (read in skyrl 0.3.0 and 0.4.0): ``env_config`` is ``getattr(cfg.environment.skyrl_gym, env_id, {})``, so
``{}`` for a custom id unless the config class has that section (swebox's SkyRL 0.4 config adds
``environment.skyrl_gym.swebox``: trainers/skyrl_config.py), it overwrites ``extras["max_turns"]`` with
``generator.max_turns`` (default 1) and never ends an episode itself, it runs ``init``/``step``/``close``
in a thread pool, takes each step's reward as a float and drops the observation that comes with
``done=True``, and calls ``aggregate_metrics`` on the registered class.

So settings travel as registered kwargs (``register_skyrl(max_turns=30, layers={...})``), as that config
section, and as the ``extra_info["swebox"]`` column written by ``swebox skyrl prepare`` (a JSON string; it
wins over both); ``extras["max_turns"]`` is ignored; the env ends its episodes by its own limits; it never
raises into the trainer: any internal failure ends the episode with reward 0.0 and ``env/errors`` = 1, and
the sandbox and the layers are released on every path.
"""

from __future__ import annotations

import json
import threading
from typing import Any

from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput
from swebox.envs.episodes.episode import METRIC_NAMES, EpisodeConfig, SWEEpisode
from swebox.envs.episodes.layers_resolver import LayerSource
from swebox.envs.episodes.task_episodes import TaskEpisodes, open_task
from swebox.envs.tasks.schema import Task

ENV_ID = "swebox"
SKYRL_COLUMNS = frozenset(
    {"prompt", "env_class", "data_source", "reward_spec", "extra_info", "max_turns", "instance", "uid"}
)
"""Dataset columns SkyRL or ``swebox skyrl prepare`` add: never task fields."""
_register_lock = threading.Lock()


def _plain(value: Any) -> Any:
    """An OmegaConf/Mapping config as plain dicts (SkyRL passes DictConfig objects)."""
    try:
        from omegaconf import DictConfig, OmegaConf

        if isinstance(value, DictConfig):
            return OmegaConf.to_container(value, resolve=True)
    except ImportError:
        pass
    return dict(value) if value else {}


def task_from_extras(extras: dict[str, Any]) -> Task:
    """The task of a dataset row: its ``instance`` column (a Task JSON string or dict), or the row's fields."""
    instance = extras.get("instance")
    if isinstance(instance, str) and instance:
        return Task.from_json(instance)
    if isinstance(instance, dict):
        return Task.from_dict({k: v for k, v in instance.items() if v is not None or k == "env"})
    from swebox.envs.tasks.adapters import to_task

    row = {k: v for k, v in extras.items() if k not in SKYRL_COLUMNS}
    if "instance_id" not in row:
        raise ValueError(
            "SWESkyRLEnv: expected the task in extras['instance'] (a Task as JSON, written by "
            "`swebox skyrl prepare`) or as columns with at least 'instance_id'; found columns "
            f"{sorted(extras)}."
        )
    return to_task(row)


def settings_from(env_config: Any, extras: dict[str, Any], registered: dict[str, Any]) -> dict[str, Any]:
    """Registered kwargs, then env_config, then the row's ``extra_info["swebox"]`` (later ones win)."""
    merged = {**registered, **_plain(env_config)}
    extra_info = extras.get("extra_info") or {}
    column = extra_info.get("swebox") if isinstance(extra_info, dict) else None
    if isinstance(column, str) and column:
        column = json.loads(column)
    if isinstance(column, dict):
        for key, value in column.items():
            merged[key] = {**merged.get(key, {}), **value} if key == "layers" and isinstance(value, dict) else value
    return merged


def split_settings(settings: dict[str, Any]) -> tuple[EpisodeConfig, LayerSource]:
    """Settings -> (EpisodeConfig, LayerSource): ``layers`` is the LayerSource dict, the rest EpisodeConfig."""
    settings = dict(settings)
    layers = LayerSource.from_dict(settings.pop("layers", None))
    return EpisodeConfig.from_dict(settings), layers


class SWESkyRLEnv(BaseTextEnv):
    """One SWE task per instance, multi-turn; reward on the final step only (the grade of the agent's diff)."""

    def __init__(self, env_config: Any = None, extras: dict[str, Any] | None = None, **settings: Any) -> None:
        super().__init__()
        self.extras = dict(extras or {})
        self.task: Task | None = None
        self.source: LayerSource | None = None
        self.metrics: dict[str, float] = dict.fromkeys(METRIC_NAMES, 0.0)
        self.error = ""
        self.done = False
        self._episode: SWEEpisode | None = None
        self._opened: TaskEpisodes | None = None
        try:  # cheap parsing only: a bad row must not raise out of skyrl_gym.make into the trainer
            self.config, self.source = split_settings(settings_from(env_config, self.extras, settings))
            self.task = task_from_extras(self.extras)
        except Exception as exc:
            self.config, self.source = EpisodeConfig(), None
            self.error = f"bad env settings or task row: {type(exc).__name__}: {exc}"
        self.max_turns = self.config.max_turns

    def init(self, prompt: list[dict[str, str]] | None = None) -> tuple[list[dict[str, str]], dict[str, Any]]:
        """Start the sandbox; returns the dataset's prompt (or the episode's own first messages)."""
        messages: list[dict[str, str]] = []
        if not self.error:
            try:
                assert self.task is not None  # no error: __init__ parsed the row's task
                self._opened = open_task(self.task, self.source, self.config)
                self._episode = self._opened.episode()
                messages = self._episode.reset()
                self.metrics = dict(self._episode.metrics)
            except Exception as exc:
                self._fail(f"init failed: {type(exc).__name__}: {exc}")
        chat = list(prompt) if prompt else messages
        if not chat:  # the model still needs something to answer; the first step ends the episode
            chat = [{"role": "user", "content": "The environment failed to start; reply with anything."}]
        return chat, {"task_id": self.task.instance_id if self.task else "", "error": self.error}

    def step(self, action: str) -> BaseTextEnvStepOutput:
        self.turns += 1
        if self.error or self._episode is None or self.done:
            if not self.error:
                self.error = "step() without a running episode (init() not called, or after the end)"
            return self._errored()
        try:
            result = self._episode.step(action)
            self.metrics = dict(self._episode.metrics)
        except Exception as exc:
            self._fail(f"step failed: {type(exc).__name__}: {exc}")
            return self._errored()
        metadata = {
            k: v
            for k, v in result.info.items()
            if k in ("task_id", "turn", "reason", "error", "audit_turn", "audit", "provenance", "cost")
        }
        if not result.done:
            return BaseTextEnvStepOutput(
                observations=[{"role": "user", "content": result.observation}],
                reward=0.0,
                done=False,
                metadata=metadata,
            )
        self.done = True
        if result.info.get("error"):
            self.error = str(result.info["error"])
        self.close()
        return BaseTextEnvStepOutput(observations=[], reward=float(result.reward), done=True, metadata=metadata)

    def _fail(self, message: str) -> None:
        self.error = message
        self.metrics["env/errors"] = 1.0
        self.close()

    def _errored(self) -> BaseTextEnvStepOutput:
        self.done = True
        self.metrics["env/errors"] = 1.0
        self.metrics["env/turns"] = float(self.turns)
        self.close()
        return BaseTextEnvStepOutput(
            observations=[], reward=0.0, done=True, metadata={"reason": "error", "error": self.error}
        )

    def close(self) -> None:
        """Stop the sandbox and release the layers; never raises, safe to call twice."""
        opened, self._opened, self._episode = self._opened, None, None
        try:
            if opened is not None:  # the sandbox, then the layers (released even when the sandbox's close fails)
                opened.close()
        except Exception as exc:  # closing must not fail the trainer either
            self.error = self.error or f"close failed: {exc}"

    def get_metrics(self) -> dict[str, Any]:
        """The episode's env/* and audit/* metrics (docs/metrics.md), as floats."""
        names = [*METRIC_NAMES, *(n for n in self.metrics if n.startswith("audit/"))]
        return {name: float(self.metrics.get(name, 0.0)) for name in names}

    @staticmethod
    def aggregate_metrics(metrics: list[dict[str, Any]]) -> dict[str, Any]:
        """Mean of each env/* and audit/* metric over the episodes (means of 0/1 values are rates)."""
        out: dict[str, Any] = {}
        for name in [*METRIC_NAMES, *sorted({n for m in metrics for n in m if n.startswith("audit/")})]:
            values = [float(m[name]) for m in metrics if isinstance(m.get(name), (int, float))]
            if values:
                out[name] = sum(values) / len(values)
        return out


def register_skyrl(env_id: str = ENV_ID, **settings: Any) -> bool:
    """Register SWESkyRLEnv (the class, so SkyRL finds ``aggregate_metrics``) under ``env_id`` with
    ``settings`` (EpisodeConfig fields and ``layers``, a LayerSource dict) as its kwargs.

    Returns True when it registered, False when ``env_id`` was already registered (a no-op: skyrl-gym's
    registry raises on duplicates). Settings are checked here, so a typo fails at registration.
    """
    import skyrl_gym

    split_settings(settings)
    with _register_lock:
        if env_id in skyrl_gym.registry:
            return False
        skyrl_gym.register(id=env_id, entry_point=SWESkyRLEnv, kwargs=dict(settings))
        return True
