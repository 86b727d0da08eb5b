"""The Gymnasium face of swebox: ``gymnasium.make("swebox/SWE-v0", tasks=...)`` (registered on
``import swebox.envs``)."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import gymnasium as gym
from gymnasium import spaces
from swebox.envs.agent.observations import truncate_middle
from swebox.envs.episodes.episode import EpisodeConfig, SWEEpisode
from swebox.envs.episodes.layers_resolver import LayerSource
from swebox.envs.episodes.task_episodes import TaskEpisodes, open_task
from swebox.envs.tasks.schema import Task

ENV_ID = "swebox/SWE-v0"
CHARSET = "\t\n" + "".join(chr(c) for c in range(0x20, 0x7F))
"""Tab, newline and printable ASCII: every observation is made of these characters only."""
_OUTSIDE = re.compile(r"[^\t\n\x20-\x7e]")


def to_charset(text: str, max_length: int) -> str:
    """``text`` within the observation space: CRLF -> LF, other characters outside CHARSET -> '?', and cut
    to ``max_length`` keeping head and tail (the cut marker is ASCII)."""
    return truncate_middle(_OUTSIDE.sub("?", text.replace("\r\n", "\n")), max_length)


def load_tasks(tasks: str | Path | Sequence[Task | dict]) -> list[Task]:
    """A Gymnasium env's tasks: a task file (any format ``swebox.envs.tasks.load`` reads), or Tasks or row dicts."""
    if isinstance(tasks, (str, Path)):
        from swebox.envs.tasks import load

        found = list(load(tasks))
    else:
        from swebox.envs.tasks.adapters import to_task

        found = [t if isinstance(t, Task) else to_task(dict(t)) for t in tasks]
    if not found:
        raise ValueError(f"SWEGymEnv(tasks=...): expected at least one task; found none in {tasks!r}.")
    return found


def merged_config(config: EpisodeConfig | dict | None, fields: dict[str, Any]) -> EpisodeConfig:
    """An env's EpisodeConfig: ``config`` with the EpisodeConfig fields given as keywords over it."""
    return EpisodeConfig.from_dict({**EpisodeConfig.from_dict(config).to_dict(), **fields})


def pick_task(tasks: list[Task], by_id: dict[str, Task], options: dict[str, Any] | None, rng: Any) -> Task:
    """The task of a reset: ``options["task_id"]``'s, else one drawn with the env's ``np_random``."""
    task_id = (options or {}).get("task_id")
    if task_id is None:
        return tasks[int(rng.integers(len(tasks)))]
    if task_id not in by_id:
        known = ", ".join(list(by_id)[:5])
        raise ValueError(
            f"reset(options={{'task_id': {task_id!r}}}): no such task; the {len(tasks)} tasks include {known}."
        )
    return by_id[task_id]


class SWEGymEnv(gym.Env[str, str]):
    """Fix a bug in a real Python repository through shell commands; rewarded when the hidden tests pass.

    ## Description
    Each episode is one SWE task (a repository snapshot with a bug, a problem statement and the tests that
    tell the bug from the fix), restored in a container-free sandbox in milliseconds. The agent acts by
    writing text that holds one tool call (a fenced ```bash block by default; see ``style``); the
    environment runs it in the sandbox and answers with the command's output and exit code.

    ## Action Space
    ``Text(max_length=max_reply_chars, charset=CHARSET)``: one model reply. Any string is accepted by
    ``step``, also characters outside CHARSET; a reply without exactly one valid tool call costs a turn and
    is answered with the expected format (counted in ``env/format_errors``).

    ## Observation Space
    ``Text(min_length=0, max_length=max_prompt_chars, charset=CHARSET)`` with CHARSET = tab, newline and
    printable ASCII (0x20-0x7E). Every observation respects it: CRLF becomes LF, any other character outside
    the charset becomes '?', and text over the limit keeps its head and tail around a marker. The first
    observation is the system prompt and the task prompt (the issue); later ones are tool outputs, at most
    ``max_obs_chars`` long.

    ## Rewards
    0.0 on every step but the last. At the end the agent's diff is graded in a fresh sandbox (the task's
    FAIL_TO_PASS and PASS_TO_PASS tests): ``reward_mode="binary"`` pays 1.0 when all pass, ``"fraction"``
    the passed share of FAIL_TO_PASS (0 if a PASS_TO_PASS test fails).

    ## Starting State
    The task's repository at /testbed (its start commit, setup commands run, hidden tests removed), its
    virtualenv at /venv, no network. The task is ``options["task_id"]`` or drawn with the reset seed.

    ## Episode End
    Terminated when the agent submits (or its sandbox dies: ``info["reason"] == "sandbox_died"``).
    Truncated after ``max_turns`` turns or ``time_limit_s`` seconds, or after ``max_episode_steps`` steps
    when ``gymnasium.make`` was given one (its TimeLimit; ``info["reason"] == "step_limit"``). The episode
    is graded whenever it ends, whoever ends it, unless ``grade_on_truncation=False``: the last step's
    reward and ``info["grade"]`` are real. (``gymnasium.make`` adds :class:`GradeOnTruncation` above its
    TimeLimit for this; wrap a hand-made TimeLimit in it too.)

    ## Arguments
    ``gymnasium.make("swebox/SWE-v0", tasks=..., layers=..., config=..., **config_fields)`` after
    ``import swebox.envs``, or ``gymnasium.make("swebox.envs:swebox/SWE-v0", ...)``, which imports it
    (Gymnasium 1.x loads no plugin entry points; the ``module:id`` form is its way to register on demand):
    ``tasks`` a task file (JSONL/JSON/parquet, see docs/tasks.md) or a list of Task objects or dicts;
    ``layers`` a LayerSource (or its dict: ``store``, ``dirs``, ``cache_root``...) or a function from a
    Task to its layer folders; ``config`` an EpisodeConfig or dict, and any EpisodeConfig field as a keyword
    (``max_turns``, ``style``, ``command_timeout_s``...). ``render_mode="ansi"`` renders the last observation.
    ``info`` holds ``task_id`` and ``turn``; reset adds ``reset_s``; the last step adds ``reason``,
    ``metrics`` (env/* timings and counts, audit/*), ``grade`` (the GradeReport as a dict), ``diff``, ``audit``
    (the exploit audit's findings, swebox.envs.audit) and ``provenance`` (what produced the verdict).

    ## Version History
    * v0: initial version.
    """

    metadata = {"render_modes": ["ansi"]}

    def __init__(
        self,
        tasks: str | Path | Sequence[Task | dict],
        layers: LayerSource | dict | Callable[[Task], list] | None = None,
        config: EpisodeConfig | dict | None = None,
        render_mode: str | None = None,
        **config_fields: Any,
    ) -> None:
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(
                f"SWEGymEnv(render_mode=...): expected None or one of "
                f"{self.metadata['render_modes']}; found {render_mode!r}."
            )
        self.config = merged_config(config, config_fields)
        self.tasks = load_tasks(tasks)
        self._by_id = {t.instance_id: t for t in self.tasks}
        self._layers = layers if callable(layers) else LayerSource.from_dict(layers)
        self.render_mode = render_mode
        self.observation_space = spaces.Text(min_length=0, max_length=self.config.max_prompt_chars, charset=CHARSET)
        self.action_space = spaces.Text(min_length=0, max_length=self.config.max_reply_chars, charset=CHARSET)
        self._episode: SWEEpisode | None = None
        self._opened: TaskEpisodes | None = None
        self._last = ""

    def _pick(self, options: dict[str, Any] | None) -> Task:
        return pick_task(self.tasks, self._by_id, options, self.np_random)

    def _episode_for(self, task: Task) -> SWEEpisode:
        if self._episode is not None and self._episode.task is task:
            return self._episode
        self._close_episode()
        self._opened = open_task(task, self._layers, self.config)
        self._episode = self._opened.episode()
        return self._episode

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict]:
        super().reset(seed=seed)
        episode = self._episode_for(self._pick(options))
        messages = episode.reset()
        self._last = to_charset("\n\n".join(m["content"] for m in messages), self.config.max_prompt_chars)
        info = {"task_id": episode.task.instance_id, "turn": 0, "reset_s": episode.metrics["env/reset_s"]}
        return self._last, info

    def step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        if self._episode is None:
            raise RuntimeError("SWEGymEnv.step() before reset(): call reset() first")
        result = self._episode.step(action)
        self._last = to_charset(result.observation, self.config.max_prompt_chars)
        return self._last, float(result.reward), result.terminated, result.truncated, dict(result.info)

    def end_episode(self, reason: str = "step_limit") -> tuple[float, dict]:
        """Grade the running episode now (a wrapper truncated it); returns the reward and the final info."""
        if self._episode is None or self._episode.done:
            raise RuntimeError("SWEGymEnv.end_episode(): no episode is running")
        return self._episode.end(reason)

    def render(self) -> str | None:
        return self._last if self.render_mode == "ansi" else None

    def _close_episode(self) -> None:
        opened, self._opened, self._episode = self._opened, None, None
        if opened is not None:  # its episode's sandbox, then the task's layers
            opened.close()

    def close(self) -> None:
        self._close_episode()


@runtime_checkable
class EndsEpisode(Protocol):
    """What GradeOnTruncation asks of the env it wraps (SWEGymEnv, SWEHarnessGymEnv): grade the episode now."""

    def end_episode(self, reason: str = "step_limit") -> tuple[float, dict]:
        """End and grade the running episode as ended by ``reason``; the reward and the final info."""
        ...


class GradeOnTruncation(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """Grades an episode that a wrapper below truncated (``gymnasium.make(..., max_episode_steps=N)``'s
    TimeLimit): that step's reward and ``info["grade"]`` are then real, as for any other end of the episode.

    Registered with the env id, so ``gymnasium.make`` puts it above the TimeLimit it adds.
    """

    def __init__(self, env: gym.Env) -> None:
        gym.utils.RecordConstructorArgs.__init__(self)
        gym.Wrapper.__init__(self, env)

    def step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        observation, reward, terminated, truncated, info = self.env.step(action)
        if truncated and not terminated and "reason" not in info:  # ended below us, not by the episode
            inner = self.env.unwrapped  # registered with swebox's env ids only: a SWEGymEnv or a SWEHarnessGymEnv
            assert isinstance(inner, EndsEpisode), f"GradeOnTruncation wraps swebox envs only, found {inner!r}"
            reward, final = inner.end_episode("step_limit")
            info = {**info, **final}
        return observation, float(reward), terminated, truncated, info
