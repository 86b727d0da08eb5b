"""Running one turn's reply: parse it into an action (``swebox.envs.agent.actions``), run the tool in the sandbox,
and render the observation (``swebox.envs.agent.observations``). An episode owns one ``ToolRunner``; it keeps the
editor's undo history for the episode's lifetime.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from swebox.envs.agent.actions import Action, ActionConfig, FormatError, parse_action
from swebox.envs.agent.editor import Editor, EditorError, SandboxFiles
from swebox.envs.agent.observations import ObservationConfig, fit, render_exec

SUBMITTED_OBSERVATION = "Your changes have been submitted."


@dataclass(frozen=True)
class ToolOutcome:
    """What one turn did: the observation to show, and the facts an episode counts in its metrics."""

    observation: str
    """The text for the model, cleaned and within ``ObservationConfig.max_chars``."""
    action: Action | None = None
    """The parsed action; None after a format error."""
    submitted: bool = False
    """The agent submitted: the episode ends and is graded."""
    format_error: bool = False
    """The reply held no single valid tool call (counted as ``env/format_errors``)."""
    timed_out: bool = False
    """The bash command hit its time limit and was killed (counted as ``env/timeouts``)."""
    exec_s: float = 0.0
    """Seconds spent running the tool in the sandbox (summed into ``env/exec_s``)."""
    exit_code: int | None = None
    """The bash command's exit status (None for other tools, a timeout, or a command that could not run)."""
    error: str | None = None
    """The sandbox itself failed (not the agent's command); the message, for ``env/errors`` and logs."""


class ToolRunner:
    """Turns replies into observations for one episode's sandbox."""

    def __init__(
        self,
        sandbox: SandboxFiles,
        actions: ActionConfig | None = None,
        observations: ObservationConfig | None = None,
        repo_dir: str = "/testbed",
    ) -> None:
        self.actions = actions or ActionConfig()
        self.observations = observations or ObservationConfig()
        self._sandbox = sandbox
        self._editor = Editor(sandbox, repo_dir=repo_dir, timeout_s=self.actions.command_timeout_s)

    def step(self, reply: object, turns_left: int | None = None) -> ToolOutcome:
        """Parse and run one reply. ``turns_left`` (after this turn) adds the reminder near the limit."""
        parsed = parse_action(reply, self.actions)
        if isinstance(parsed, FormatError):
            return ToolOutcome(fit(parsed.message, self.observations, turns_left), format_error=True)
        return self.run(parsed, turns_left)

    def run(self, action: Action, turns_left: int | None = None) -> ToolOutcome:
        """Run one parsed action. Never raises: a sandbox failure is reported in ``error``."""
        if action.tool == "submit":
            return ToolOutcome(SUBMITTED_OBSERVATION, action=action, submitted=True)
        if action.tool == "bash":
            return self._bash(action, turns_left)
        return self._edit(action, turns_left)

    def _bash(self, action: Action, turns_left: int | None) -> ToolOutcome:
        started = time.monotonic()
        try:
            result = self._sandbox.exec(action.arguments["command"], timeout=self.actions.command_timeout_s)
        except Exception as exc:  # e.g. the agent killed its shell; the episode decides whether to go on
            elapsed = time.monotonic() - started
            text = f"The command could not be run: {type(exc).__name__}: {exc}"
            return ToolOutcome(fit(text, self.observations, turns_left), action, exec_s=elapsed, error=text)
        return ToolOutcome(
            render_exec(result, self.observations, turns_left),
            action,
            timed_out=bool(result.timed_out),
            exit_code=None if result.timed_out else result.exit_code,
            exec_s=float(result.duration_s),
        )

    def _edit(self, action: Action, turns_left: int | None) -> ToolOutcome:
        started = time.monotonic()
        error = None
        try:
            text = self._editor.run(action.arguments)
        except EditorError as exc:  # the agent's misuse: show it, nothing failed
            text = f"Error: {exc}"
        except Exception as exc:
            text = f"The editor could not run: {type(exc).__name__}: {exc}"
            error = text
        elapsed = time.monotonic() - started
        return ToolOutcome(fit(text, self.observations, turns_left), action, exec_s=elapsed, error=error)
