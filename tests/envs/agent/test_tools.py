"""ToolRunner: a reply in, an observation and the turn's facts out (bash, submit, format errors, failures)."""

from __future__ import annotations

from swebox.envs.agent.actions import Action, ActionConfig
from swebox.envs.agent.formats import FORMAT_HELP
from swebox.envs.agent.observations import ObservationConfig
from swebox.envs.agent.tools import SUBMITTED_OBSERVATION, ToolRunner
from swebox.envs.sandbox import ExecResult

from tests.envs.agent.fakes import exec_result


class ScriptedShell:
    """Answers each exec with the next scripted result (or raises it), recording commands and timeouts."""

    def __init__(self, *results: ExecResult | Exception) -> None:
        self.results = list(results)
        self.calls: list[tuple[str, float | None]] = []

    def exec(self, command: str, timeout: float | None = None) -> ExecResult:
        self.calls.append((command, timeout))
        result = self.results.pop(0)
        if isinstance(result, Exception):
            raise result
        return result

    def read_file(self, path: str) -> bytes:
        raise AssertionError("bash turns do not read files")

    def write_file(self, path: str, data: bytes | str) -> None:
        raise AssertionError("bash turns do not write files")


def test_bash_reply_runs_with_the_configured_timeout_and_reports_exec_time():
    shell = ScriptedShell(exec_result("hello\n", 0))
    runner = ToolRunner(shell, ActionConfig(command_timeout_s=12.5))
    outcome = runner.step("```bash\necho hello\n```")
    assert shell.calls == [("echo hello", 12.5)]
    assert outcome.observation == "<returncode>0</returncode>\n<output>\nhello\n</output>"
    assert outcome.action == Action("bash", {"command": "echo hello"})
    assert outcome.exec_s == 0.25
    assert not (outcome.submitted or outcome.format_error or outcome.timed_out or outcome.error)


def test_timeout_is_reported_and_counted_but_not_fatal():
    shell = ScriptedShell(exec_result("", None, timed_out=True), exec_result("ok", 0))
    runner = ToolRunner(shell)
    first = runner.step("```bash\nsleep 1000\n```")
    assert first.timed_out and first.error is None
    assert first.observation.startswith("The command timed out and was killed; the episode continues.")
    assert runner.step("```bash\ntrue\n```").observation == "<returncode>0</returncode>\n<output>\nok\n</output>"


def test_submit_runs_nothing():
    shell = ScriptedShell()
    outcome = ToolRunner(shell).step("Done.\n```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```")
    assert outcome.submitted and outcome.observation == SUBMITTED_OBSERVATION
    assert outcome.action == Action("submit", {})
    assert shell.calls == []


def test_format_error_becomes_the_observation_with_the_reminder_and_runs_nothing():
    shell = ScriptedShell()
    runner = ToolRunner(shell, ActionConfig(style="json_tool_call"), ObservationConfig(warn_turns_left=3))
    outcome = runner.step("```bash\nls\n```", turns_left=2)
    assert outcome.format_error and outcome.action is None and shell.calls == []
    assert outcome.observation == (
        "Format error: found no <tool_call> block; every reply must contain exactly one.\n\n"
        + FORMAT_HELP["json_tool_call"]
        + "\n\n[2 turns left. Submit your changes before you run out of turns.]"
    )


def test_sandbox_failure_is_an_observation_and_an_error_not_an_exception():
    shell = ScriptedShell(RuntimeError("shell died"))
    outcome = ToolRunner(shell).step("```bash\nkill -9 $$\n```")
    assert outcome.observation == "The command could not be run: RuntimeError: shell died"
    assert outcome.error == outcome.observation
    assert not outcome.format_error


def test_openai_tool_call_keeps_its_id_for_the_tool_message():
    shell = ScriptedShell(exec_result("x", 0))
    message = {
        "role": "assistant",
        "tool_calls": [{"id": "c7", "type": "function", "function": {"name": "bash", "arguments": '{"command": "x"}'}}],
    }
    outcome = ToolRunner(shell, ActionConfig(style="json_tool_call")).step(message)
    assert outcome.action == Action("bash", {"command": "x"}, call_id="c7")
