"""The action layer against the real sandbox: editor and bash tools, scripted episodes in every action style,
and hostile actions (cd /, rm -rf the repo, killing the shell, hangs, writes to read-only or host paths)."""

from __future__ import annotations

import json
import os

import pytest
from swebox.envs.agent.actions import Action, ActionConfig
from swebox.envs.agent.editor import Editor, EditorError
from swebox.envs.agent.observations import ObservationConfig
from swebox.envs.agent.tools import ToolRunner
from swebox.envs.sandbox import Sandbox, SandboxPolicy

BUGGY = "def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a * b\n"


@pytest.fixture
def sandbox(tmp_path):
    layer = tmp_path / "layer"
    (layer / "testbed" / "pkg").mkdir(parents=True)
    (layer / "testbed" / "a.py").write_text(BUGGY)
    (layer / "testbed" / "pkg" / "__init__.py").write_text("")
    (layer / "testbed" / ".hidden").write_text("")
    # a sandbox that cannot start is a failure of what these tests prove, never a reason to skip them
    box = Sandbox([layer], SandboxPolicy(network="none", command_timeout_s=20)).start()
    yield box
    box.close()


def test_editor_edits_the_files_the_shell_sees(sandbox):
    editor = Editor(sandbox)
    assert editor.view("/testbed/a.py", [1, 2]) == (
        "Here's the result of running `cat -n` on /testbed/a.py (lines 1-2 of 6):\n"
        "     1\tdef add(a, b):\n     2\t    return a - b"
    )
    assert editor.view("/testbed") == (
        "Files and directories up to 2 levels deep in /testbed, excluding hidden items:\n"
        "/testbed/a.py\n/testbed/pkg\n/testbed/pkg/__init__.py"
    )
    editor.str_replace("/testbed/a.py", "return a - b", "return a + b")
    editor.insert("/testbed/a.py", 0, "import math")
    editor.create("/testbed/pkg/sub/new.py", "X = 1\n")
    check = sandbox.exec("cd /testbed && python3 -c 'import a; print(a.add(2, 3))' && cat pkg/sub/new.py", timeout=20)
    assert (check.exit_code, check.output) == (0, "5\nX = 1\n")
    with pytest.raises(EditorError, match="occurs 2 times in /testbed/a.py, at lines 2, 6"):
        editor.str_replace("/testbed/a.py", "(a, b):", "(x, y):")
    editor.undo_edit("/testbed/a.py")
    editor.undo_edit("/testbed/a.py")
    assert sandbox.read_file("/testbed/a.py") == BUGGY.encode()
    editor.undo_edit("/testbed/pkg/sub/new.py")
    assert sandbox.exec("test -e /testbed/pkg/sub/new.py; echo $?", timeout=20).output == "1\n"


def play(sandbox: Sandbox, style: str, replies: list[object]) -> list:
    runner = ToolRunner(sandbox, ActionConfig(style=style, command_timeout_s=20), ObservationConfig(warn_turns_left=1))
    return [runner.step(reply, turns_left=len(replies) - i - 1) for i, reply in enumerate(replies)]


def test_scripted_episode_bash_block(sandbox):
    outcomes = play(
        sandbox,
        "bash_block",
        [
            "Look first.\n```bash\ncd /testbed && grep -n 'return a - b' a.py\n```",
            "Fix it.\n```bash\nsed -i 's/return a - b/return a + b/' a.py\n"
            "python3 -c 'import a; print(a.add(2, 3))'\n```",
            "Oops, two blocks:\n```bash\nls\n```\n```bash\npwd\n```",
            "```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```",
        ],
    )
    assert outcomes[0].observation == "<returncode>0</returncode>\n<output>\n2:    return a - b\n</output>"
    # the shell is persistent: the `cd /testbed` of turn 1 still holds in turn 2
    assert outcomes[1].observation.startswith("<returncode>0</returncode>\n<output>\n5\n</output>")
    assert outcomes[2].format_error and not outcomes[2].submitted
    assert outcomes[3].submitted and [o.submitted for o in outcomes[:3]] == [False, False, False]
    assert b"return a + b" in sandbox.read_file("/testbed/a.py")


def test_scripted_episode_xml_function(sandbox):
    outcomes = play(
        sandbox,
        "xml_function",
        [
            "<function=str_replace_editor>\n<parameter=command>str_replace</parameter>\n"
            "<parameter=path>/testbed/a.py</parameter>\n<parameter=old_str>    return a - b</parameter>\n"
            "<parameter=new_str>    return a + b</parameter>\n</function>",
            "<function=bash>\n<parameter=command>cd /testbed && python3 -c 'import a; print(a.add(1, 1))'"
            "</parameter>\n</function>",
            "<function=submit>\n</function>",
        ],
    )
    assert outcomes[0].observation.startswith("The file /testbed/a.py has been edited.")
    assert "     2\t    return a + b" in outcomes[0].observation
    assert outcomes[1].observation == (
        "<returncode>0</returncode>\n<output>\n2\n</output>\n\n"
        "[1 turn left. Submit your changes before you run out of turns.]"
    )
    assert outcomes[2].submitted


def test_scripted_episode_json_tool_calls(sandbox):
    def call(name: str, **arguments: object) -> dict:
        function = {"name": name, "arguments": json.dumps(arguments)}
        return {"role": "assistant", "content": None, "tool_calls": [{"id": name, "function": function}]}

    outcomes = play(
        sandbox,
        "json_tool_call",
        [
            call("str_replace_editor", command="view", path="/testbed/a.py", view_range=[2, 2]),
            '<tool_call>{"name": "str_replace_editor", "arguments": {"command": "str_replace", "path": '
            '"/testbed/a.py", "old_str": "a - b", "new_str": "a + b"}}</tool_call>',
            call(
                "bash",
                command="cd /testbed && git status 2>&1 | head -1; python3 -c 'import a; print(a.add(4, 4))'",
            ),
            call("submit"),
        ],
    )
    assert outcomes[0].observation == (
        "Here's the result of running `cat -n` on /testbed/a.py (lines 2-2 of 6):\n     2\t    return a - b"
    )
    assert outcomes[0].action == Action(
        "str_replace_editor",
        {"command": "view", "path": "/testbed/a.py", "view_range": [2, 2]},
        "str_replace_editor",
    )
    assert outcomes[2].observation.endswith(
        "8\n</output>\n\n[1 turn left. Submit your changes before you run out of turns.]"
    )
    assert outcomes[3].submitted and outcomes[3].action.call_id == "submit"


def test_hostile_actions_leave_the_runner_working(sandbox):
    runner = ToolRunner(sandbox, ActionConfig(command_timeout_s=2), ObservationConfig())

    def bash(command: str):
        return runner.step(f"```bash\n{command}\n```")

    hang = bash("sleep 60")
    assert hang.timed_out and hang.error is None
    assert hang.observation.startswith("The command timed out and was killed; the episode continues.")
    assert bash("cd / && rm -rf /testbed; ls /testbed").observation.startswith("<returncode>2</returncode>")
    gone = runner.run(Action("str_replace_editor", {"command": "view", "path": "/testbed/a.py"}))
    assert gone.observation == "Error: The path /testbed/a.py does not exist."
    # /usr is the host's, bound read-only: whatever the editor reports, the host's /usr is never written.
    # (At the time of writing, write_file lands under the bind mount, unseen by the shell: reported.)
    runner.run(Action("str_replace_editor", {"command": "create", "path": "/usr/evil.py", "file_text": "x"}))
    assert not os.path.exists("/usr/evil.py")
    assert bash("touch /usr/evil.sh").observation.startswith("<returncode>1</returncode>")
    assert not os.path.exists("/usr/evil.sh")
    killed = bash("kill -9 $$")
    assert killed.error is None and killed.observation  # reported as an observation, whatever the sandbox says
    after = bash("echo alive")
    assert after.observation == "<returncode>0</returncode>\n<output>\nalive\n</output>"


def test_editor_never_writes_through_a_link_to_the_host(sandbox, tmp_path):
    host_file = tmp_path / "host_secret.txt"
    host_file.write_text("host\n")
    runner = ToolRunner(sandbox)
    runner.step(f"```bash\nln -s {host_file} /testbed/link.txt\n```")
    outcome = runner.run(
        Action("str_replace_editor", {"command": "create", "path": "/testbed/link.txt", "file_text": "owned\n"})
    )
    assert outcome.error is None
    assert host_file.read_text() == "host\n"
