"""What an episode is given and what it gives back: its configuration, its first messages, one step's result and
the names of the metrics it reports (docs/metrics.md). :class:`swebox.envs.episodes.episode.SWEEpisode` plays by
them; the names are importable from ``swebox.envs.episodes.episode`` too.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from swebox.envs.agent.actions import STYLES, ActionConfig
from swebox.envs.agent.observations import ObservationConfig, truncate_middle
from swebox.envs.agent.prompts import system_prompt, task_prompt
from swebox.envs.audit import MODES as AUDIT_MODES
from swebox.envs.episodes.episode_cost import METRICS as COST_METRICS
from swebox.envs.sandbox import SandboxPolicy
from swebox.envs.sandbox.strict import strict_from_dict
from swebox.envs.tasks.graders.grading import REWARD_MODES
from swebox.envs.tasks.schema import Task

METRIC_NAMES = (
    "env/reset_s",
    "env/exec_s",
    "env/grade_s",
    "env/turns",
    "env/format_errors",
    "env/timeouts",
    "env/resolved",
    "env/f2p_frac",
    "env/errors",
    "env/grade_cache_hits",
    "env/sandbox_deaths",
    "env/grade_wait_s",
    *COST_METRICS,
)
"""Per-episode metrics, as defined in docs/metrics.md."""


@dataclass
class EpisodeConfig:
    """How an episode runs. Flat, so it travels as keyword arguments and dataset columns."""

    max_turns: int = 30
    """Turns (one reply and its observation each) before the episode is truncated and graded."""
    time_limit_s: float = 1800.0
    """Wall-clock seconds from reset; a command never runs past it, and the episode is truncated after it."""
    style: str = "bash_block"
    """Action convention: "bash_block", "xml_function" or "json_tool_call" (swebox.envs.agent.actions)."""
    command_timeout_s: float = 60.0
    """Wall-clock limit of one command; the observation says it timed out and the episode goes on."""
    max_reply_chars: int = 100_000
    """Longer replies are a format error, not parsed."""
    max_obs_chars: int = 10_000
    """Every observation after the first is at most this long (long output keeps its head and tail)."""
    warn_turns_left: int = 3
    """Observations remind the agent to submit when this many turns or fewer remain (0: never)."""
    max_prompt_chars: int = 60_000
    """The first observation (system + task prompt) is cut to this length (a huge issue text loses its middle)."""
    grade_timeout_s: float = 900.0
    """Wall-clock limit of the test run that grades the episode (counted from when it holds a grading slot)."""
    grade_slots: int = 0
    """Gradings at once on this node, across processes (envs/tasks/graders/grade_slots.py); 0: one per CPU."""
    reward_mode: str = "binary"
    """"binary": 1.0 when resolved; "fraction": share of FAIL_TO_PASS passing (0 if a PASS_TO_PASS fails)."""
    grade_on_truncation: bool = True
    """Grade the repository when the turn or time limit ends the episode (False: reward 0 without grading)."""
    max_diff_bytes: int = 10_000_000
    """A larger agent diff is not graded (reward 0)."""
    setup_timeout_s: float = 600.0
    """Wall-clock limit of each of the task's setup commands."""
    sandbox: dict[str, Any] = field(default_factory=dict)
    """SandboxPolicy fields that differ from its defaults, e.g. {"memory_mb": 8192} (network stays "none")."""
    cost: bool = True
    """Measure each rollout's CPU seconds, peak memory and bytes written (info["cost"], env/cpu_s...;
    swebox.envs.episodes.episode_cost); False: only its wall seconds."""
    audit: str = "report"
    """Exploit audit of every turn (swebox.envs.audit, docs/tasks.md): "off"; "report" (findings in info["audit"]
    and audit/* metrics only); "zero" (a flagged rollout scores 0); "drop" (the trainer keeps it out of the loss)."""

    def __post_init__(self) -> None:
        if not isinstance(self.max_turns, int) or self.max_turns < 1:
            raise ValueError(f"EpisodeConfig.max_turns: expected a whole number >= 1; found {self.max_turns!r}.")
        for name in ("time_limit_s", "command_timeout_s", "grade_timeout_s", "setup_timeout_s"):
            if not getattr(self, name) > 0:
                raise ValueError(
                    f"EpisodeConfig.{name}: expected a positive number of seconds; found {getattr(self, name)!r}."
                )
        if self.style not in STYLES:
            raise ValueError(f"EpisodeConfig.style: expected one of {', '.join(STYLES)}; found {self.style!r}.")
        if self.reward_mode not in REWARD_MODES:
            raise ValueError(f"EpisodeConfig.reward_mode: expected one of {REWARD_MODES}; found {self.reward_mode!r}.")
        if self.max_prompt_chars < self.max_obs_chars:
            raise ValueError(
                f"EpisodeConfig.max_prompt_chars: expected >= max_obs_chars ({self.max_obs_chars}); "
                f"found {self.max_prompt_chars}. Raise max_prompt_chars."
            )
        if not isinstance(self.grade_slots, int) or self.grade_slots < 0:
            raise ValueError(
                f"EpisodeConfig.grade_slots: expected a whole number >= 0 (0: one per CPU); found {self.grade_slots!r}."
            )
        if self.max_diff_bytes < 1:
            raise ValueError(f"EpisodeConfig.max_diff_bytes: expected >= 1; found {self.max_diff_bytes}.")
        if self.sandbox.get("network", "none") != "none":
            raise ValueError(
                f"EpisodeConfig.sandbox: episodes run without network; found network="
                f"{self.sandbox['network']!r}. Drop the key."
            )
        if self.audit not in AUDIT_MODES:
            raise ValueError(f"EpisodeConfig.audit: expected one of {', '.join(AUDIT_MODES)}; found {self.audit!r}.")
        self.actions()
        self.observations()
        self.policy()

    def actions(self) -> ActionConfig:
        return ActionConfig(
            style=self.style,  # type: ignore[arg-type]
            max_reply_chars=self.max_reply_chars,
            command_timeout_s=self.command_timeout_s,
        )

    def observations(self) -> ObservationConfig:
        return ObservationConfig(max_chars=self.max_obs_chars, warn_turns_left=self.warn_turns_left)

    def policy(self) -> SandboxPolicy:
        return SandboxPolicy.from_dict({**self.sandbox, "network": "none"})

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any] | EpisodeConfig | None) -> EpisodeConfig:
        """From a dict; unknown keys are an error listing the valid ones."""
        return strict_from_dict(cls, data or {})


@dataclass
class StepResult:
    """What one step returns."""

    observation: str
    """The text for the model (at most max_obs_chars)."""
    reward: float
    """0.0 until the last step; then the grade."""
    terminated: bool
    """The agent submitted (or the environment failed)."""
    truncated: bool
    """The turn or time limit ended the episode."""
    info: dict[str, Any]
    """Per step: task_id, turn, format_error, timed_out, action ({tool, arguments} or None), exit_code, exec_s,
    audit_turn (the turn's audit findings). At the end also reason, metrics, grade, diff, audit, provenance."""

    @property
    def done(self) -> bool:
        return self.terminated or self.truncated


def first_messages(task: Task, config: EpisodeConfig) -> list[dict[str, str]]:
    """System prompt and task prompt for ``config.style``; the user message cut so both fit max_prompt_chars."""
    system = system_prompt(config.style)
    user = task_prompt(task.problem_statement, config.style, max_turns=config.max_turns)
    user = truncate_middle(user, max(1, config.max_prompt_chars - len(system) - 2))
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]
