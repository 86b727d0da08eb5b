"""Parsing replies into actions, for each style, and every malformed reply becoming a FormatError."""

from __future__ import annotations

import json
import random

import pytest
from swebox.envs.agent.actions import Action, ActionConfig, FormatError, parse_action
from swebox.envs.agent.formats import FORMAT_HELP, TOOL_PARAMETERS, TOOL_SCHEMAS

BASH = ActionConfig()
XML = ActionConfig(style="xml_function")
JSON = ActionConfig(style="json_tool_call")


def fence(body: str, lang: str = "bash") -> str:
    return f"```{lang}\n{body}\n```"


def openai_message(name: str, arguments: object, call_id: str = "call_1") -> dict:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}],
    }


def assert_format_error(result: object, reason_part: str, config: ActionConfig) -> None:
    assert isinstance(result, FormatError), result
    assert reason_part in result.reason
    assert result.message == f"Format error: {result.reason}.\n\n{FORMAT_HELP[config.style]}"


# ---- config ----------------------------------------------------------------------------------------------
def test_config_rejects_bad_values_with_how_to_fix():
    with pytest.raises(ValueError, match=r"expected one of bash_block, xml_function, json_tool_call; found 'yaml'"):
        ActionConfig(style="yaml")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_reply_chars"):
        ActionConfig(max_reply_chars=0)
    with pytest.raises(ValueError, match="command_timeout_s"):
        ActionConfig(command_timeout_s=0)


def test_tool_parameters_follow_the_schemas():
    assert TOOL_PARAMETERS == {
        "bash": ("command",),
        "str_replace_editor": (
            "command",
            "path",
            "file_text",
            "old_str",
            "new_str",
            "insert_line",
            "view_range",
        ),
        "submit": (),
    }
    assert [s["function"]["name"] for s in TOOL_SCHEMAS] == ["bash", "str_replace_editor", "submit"]


# ---- bash_block ------------------------------------------------------------------------------------------
def test_bash_block_takes_the_one_block_with_thought_around_it():
    reply = "THOUGHT: look around.\n\n" + fence("cd /testbed && ls -la\ngrep -n foo a.py") + "\nthanks"
    assert parse_action(reply, BASH) == Action("bash", {"command": "cd /testbed && ls -la\ngrep -n foo a.py"})


def test_bash_block_keeps_the_command_byte_for_byte():
    body = "cat <<'EOF' > /testbed/x.py\n    if a:\n\treturn 'é→😀'\nEOF"
    assert parse_action(fence(body), BASH) == Action("bash", {"command": body})


@pytest.mark.parametrize(
    "command",
    [
        "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT",
        "  echo 'COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT'",
        'echo "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT" && git add -A && git diff --cached',
        "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\ngit diff",
    ],
)
def test_submit_sentinel_on_the_first_line_submits(command):
    assert parse_action(fence(command), BASH) == Action("submit", {})


@pytest.mark.parametrize(
    "command",
    [
        "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUTS",
        "ls\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT",
        "echo done",
    ],
)
def test_sentinel_elsewhere_is_an_ordinary_command(command):
    assert parse_action(fence(command), BASH) == Action("bash", {"command": command})


@pytest.mark.parametrize(
    ("reply", "reason_part"),
    [
        ("I will now look at the code.", "found no ```bash block; every reply must contain exactly one"),
        (fence("ls") + "\n" + fence("pwd"), "found 2 ```bash blocks; reply with exactly one"),
        (fence("print(1)", "python") + "\n" + fence("ls", ""), "code blocks found: (no language), python"),
        ("```bash ls```", "the ```bash block is not closed"),
        (fence("   \n  "), "the bash command is empty"),
        ("", "found no ```bash block"),
    ],
)
def test_bash_block_format_errors(reply, reason_part):
    assert_format_error(parse_action(reply, BASH), reason_part, BASH)


# ---- xml_function ----------------------------------------------------------------------------------------
def test_xml_bash_and_editor_calls_with_typed_arguments():
    reply = "Let me look.\n<function=bash>\n<parameter=command>ls /testbed</parameter>\n</function>"
    assert parse_action(reply, XML) == Action("bash", {"command": "ls /testbed"})
    reply = (
        "<function=str_replace_editor>\n<parameter=command>view</parameter>\n"
        "<parameter=path>/testbed/a.py</parameter>\n<parameter=view_range>[3, -1]</parameter>\n</function>"
    )
    assert parse_action(reply, XML) == Action(
        "str_replace_editor", {"command": "view", "path": "/testbed/a.py", "view_range": [3, -1]}
    )
    reply = (
        "<tool_call>\n<function=str_replace_editor>\n<parameter=command>\ninsert\n</parameter>\n"
        "<parameter=path>\n/testbed/a.py\n</parameter>\n<parameter=insert_line>\n7\n</parameter>\n"
        "<parameter=new_str>\n    x = 1\n\n</parameter>\n</function>\n</tool_call>"
    )
    # Qwen3-Coder style: values on their own lines; exactly one framing newline is dropped on each side.
    assert parse_action(reply, XML) == Action(
        "str_replace_editor",
        {"command": "insert", "path": "/testbed/a.py", "insert_line": 7, "new_str": "    x = 1\n"},
    )


def test_xml_str_replace_keeps_whitespace_and_allows_empty_new_str():
    reply = (
        "<function=str_replace_editor><parameter=command>str_replace</parameter>"
        "<parameter=path>/testbed/a.py</parameter><parameter=old_str>  a  </parameter>"
        "<parameter=new_str></parameter></function>"
    )
    assert parse_action(reply, XML) == Action(
        "str_replace_editor",
        {"command": "str_replace", "path": "/testbed/a.py", "old_str": "  a  ", "new_str": ""},
    )


def test_xml_submit_and_bash_sentinel_both_submit():
    assert parse_action("<function=submit>\n</function>", XML) == Action("submit", {})
    sentinel = "<function=bash><parameter=command>echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT</parameter></function>"
    assert parse_action(sentinel, XML) == Action("submit", {})


@pytest.mark.parametrize(
    ("reply", "reason_part"),
    [
        ("just text", "found no <function=...> call"),
        ("<function=bash><parameter=command>ls</parameter>", "without a closing </function>"),
        ("<function=bash><parameter=command>ls</parameter></function>" * 2, "found 2 <function=...> calls"),
        (
            "<function=python><parameter=code>1</parameter></function>",
            "unknown tool 'python'; the tools are bash",
        ),
        ("<function=bash></function>", 'bash needs a string parameter "command"'),
        ("<function=bash><parameter=cmd>ls</parameter></function>", "unexpected parameter(s) 'cmd' for bash"),
        ("<function=bash><parameter=command>ls</function>", "is not closed with </parameter>"),
        (
            "<function=bash><parameter=command>a</parameter><parameter=command>b</parameter></function>",
            "parameter 'command' is given twice",
        ),
        (
            "<function=str_replace_editor><parameter=command>delete</parameter>"
            "<parameter=path>/a</parameter></function>",
            "must be one of view, create, str_replace, insert, undo_edit; found 'delete'",
        ),
        (
            "<function=str_replace_editor><parameter=command>create</parameter>"
            "<parameter=path>/a</parameter></function>",
            "str_replace_editor create needs parameter(s) 'file_text'",
        ),
        (
            "<function=str_replace_editor><parameter=command>insert</parameter><parameter=path>/a</parameter>"
            "<parameter=insert_line>five</parameter><parameter=new_str>x</parameter></function>",
            "insert_line must be a whole number; found 'five'",
        ),
        (
            "<function=str_replace_editor><parameter=command>view</parameter><parameter=path>/a</parameter>"
            "<parameter=view_range>[1]</parameter></function>",
            "view_range must be two whole numbers",
        ),
    ],
)
def test_xml_format_errors(reply, reason_part):
    assert_format_error(parse_action(reply, XML), reason_part, XML)


# ---- json_tool_call --------------------------------------------------------------------------------------
def test_hermes_tool_call_in_text():
    call = {
        "name": "str_replace_editor",
        "arguments": {"command": "view", "path": "/testbed", "view_range": [1, 5]},
    }
    reply = f"I'll look.\n<tool_call>\n{json.dumps(call)}\n</tool_call>"
    assert parse_action(reply, JSON) == Action(
        "str_replace_editor", {"command": "view", "path": "/testbed", "view_range": [1, 5]}
    )
    double_encoded = '<tool_call>{"name": "bash", "arguments": "{\\"command\\": \\"ls\\"}"}</tool_call>'
    assert parse_action(double_encoded, JSON) == Action("bash", {"command": "ls"})
    assert parse_action('<tool_call>{"name": "submit"}</tool_call>', JSON) == Action("submit", {})


def test_openai_tool_calls_message_keeps_the_call_id():
    message = openai_message("bash", json.dumps({"command": "pytest -q"}), call_id="call_abc")
    assert parse_action(message, JSON) == Action("bash", {"command": "pytest -q"}, call_id="call_abc")
    assert parse_action(openai_message("submit", "{}"), JSON) == Action("submit", {}, call_id="call_1")
    # some clients hand over arguments already decoded, and insert_line as a string
    decoded = openai_message(
        "str_replace_editor", {"command": "insert", "path": "/a", "insert_line": "3", "new_str": "x"}
    )
    assert parse_action(decoded, JSON) == Action(
        "str_replace_editor", {"command": "insert", "path": "/a", "insert_line": 3, "new_str": "x"}, "call_1"
    )


def test_message_without_tool_calls_falls_back_to_its_text():
    message = {
        "role": "assistant",
        "content": '<tool_call>{"name": "bash", "arguments": {"command": "ls"}}</tool_call>',
    }
    assert parse_action(message, JSON) == Action("bash", {"command": "ls"})
    parts = {"role": "assistant", "content": [{"type": "text", "text": fence("ls")}]}
    assert parse_action(parts, BASH) == Action("bash", {"command": "ls"})


@pytest.mark.parametrize(
    ("reply", "reason_part"),
    [
        ("no call here", "found no <tool_call> block"),
        ("<tool_call>{}", "without a closing </tool_call>"),
        ('<tool_call>{"name": "bash", "arguments": {"command": "ls"</tool_call>', "is not valid JSON"),
        ("<tool_call>[1, 2]</tool_call>", 'must be a JSON object with a string "name"'),
        (
            '<tool_call>{"name": "bash", "arguments": [1]}</tool_call>',
            '"arguments" must be a JSON object; found list',
        ),
        ('<tool_call>{"name": "bash", "arguments": "{oops"}</tool_call>', '"arguments" is not valid JSON'),
        (
            '<tool_call>{"name": "bash", "arguments": {"command": 5}}</tool_call>',
            "bash needs a string parameter",
        ),
        ('<tool_call>{"name": "rm", "arguments": {}}</tool_call>' * 2, "found 2 <tool_call> blocks"),
        (openai_message("bash", "{not json"), '"arguments" is not valid JSON'),
        (openai_message("bash", "[]"), '"arguments" must be a JSON object; found list'),
        ({"role": "assistant", "tool_calls": [{"function": {"name": "submit"}}] * 2}, "has 2 tool calls"),
        ({"role": "assistant", "tool_calls": [{"type": "function"}]}, "a tool call must look like"),
        (
            openai_message("str_replace_editor", {"command": "create", "path": "/a", "file_text": 3}),
            "parameter 'file_text' must be a string; found int",
        ),
    ],
)
def test_json_format_errors(reply, reason_part):
    assert_format_error(parse_action(reply, JSON), reason_part, JSON)


# ---- hostile input, any style ----------------------------------------------------------------------------
@pytest.mark.parametrize("config", [BASH, XML, JSON], ids=lambda c: c.style)
def test_huge_reply_is_rejected_before_parsing(config):
    reply = fence("ls") + "x" * config.max_reply_chars
    assert_format_error(parse_action(reply, config), f"more than the limit of {config.max_reply_chars}", config)


def test_nul_and_lone_surrogates_in_arguments_are_format_errors():
    assert_format_error(parse_action(fence("echo a\x00b"), BASH), "contains a NUL character", BASH)
    assert_format_error(parse_action(fence("echo \ud800"), BASH), "lone surrogate", BASH)
    # NUL outside the action is harmless prose
    assert parse_action("thinking\x00...\n" + fence("ls"), BASH) == Action("bash", {"command": "ls"})


@pytest.mark.parametrize("reply", [None, 42, b"```bash\nls\n```", ["ls"], {"content": 7}])
def test_non_text_replies_are_format_errors(reply):
    result = parse_action(reply, BASH)
    assert isinstance(result, FormatError)
    assert result.message.endswith(FORMAT_HELP["bash_block"])


@pytest.mark.parametrize("config", [BASH, XML, JSON], ids=lambda c: c.style)
def test_random_garbage_never_raises(config):
    rng = random.Random(1234)
    alphabet = '`<>=/{}[]":,\n bashfunctionparametertool_call\x00é😀\ud800'
    for _ in range(500):
        reply = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 200)))
        assert isinstance(parse_action(reply, config), Action | FormatError)


def test_calls_quoted_in_the_thinking_part_are_ignored_unless_configured_otherwise():
    reply = "<think>I could run\n" + fence("rm -rf /") + "\nbut no.</think>\nLet me list.\n" + fence("ls")
    assert parse_action(reply, BASH) == Action("bash", {"command": "ls"})
    literal = ActionConfig(skip_thinking=False)
    assert_format_error(parse_action(reply, literal), "found 2 ```bash blocks", literal)
    # Without a </think> there is nothing to split at: the whole reply is parsed.
    assert parse_action("<think>still thinking " + fence("ls"), BASH) == Action("bash", {"command": "ls"})


def test_huge_tool_call_arguments_count_towards_the_reply_limit():
    small = ActionConfig(style="json_tool_call", max_reply_chars=1000)
    message = openai_message("bash", json.dumps({"command": "echo " + "x" * 2000}))
    assert_format_error(parse_action(message, small), "more than the limit of 1000", small)
