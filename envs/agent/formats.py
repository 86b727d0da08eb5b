"""What the tools are and how each action style writes a call to them: the tool schemas (OpenAI function
format, also what Hermes-style chat templates render into ``<tools>``), the submit sentinel of the
``bash_block`` style, and the short format reminder shown after a format error.
"""

from __future__ import annotations

import json
import re
from typing import Any

SUBMIT_WORD = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
# A bash command whose first line echoes the sentinel submits (mini-swe-agent's convention); quotes and a
# chained tail (`echo ... && git diff`, an older mini-swe-agent habit) are accepted, the tail is not run.
SUBMIT_SENTINEL = re.compile(rf"^echo\s+(['\"]?){SUBMIT_WORD}\1(?:\s|;|&|\||$)")

_EDITOR_DESCRIPTION = (
    "View, create and edit files. `view` shows a file with line numbers (like `cat -n`), optionally only "
    "`view_range` [start, end] (end -1 means to the end), or lists a directory two levels deep. `create` "
    "writes a new file (it refuses to overwrite one). `str_replace` replaces `old_str`, which must occur "
    "exactly once in the file and match it exactly, whitespace included, by `new_str`. `insert` inserts "
    "`new_str` after line `insert_line` (0 inserts at the top). `undo_edit` reverts the last edit of `path`. "
    "Paths must be absolute, e.g. /testbed/pkg/module.py."
)

TOOL_SCHEMAS: tuple[dict[str, Any], ...] = (
    {
        "type": "function",
        "function": {
            "name": "bash",
            "description": "Run a bash command in the machine; returns its output and exit code.",
            "parameters": {
                "type": "object",
                "properties": {"command": {"type": "string", "description": "The command to run."}},
                "required": ["command"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "str_replace_editor",
            "description": _EDITOR_DESCRIPTION,
            "parameters": {
                "type": "object",
                "properties": {
                    "command": {
                        "type": "string",
                        "enum": ["view", "create", "str_replace", "insert", "undo_edit"],
                        "description": "The editor command.",
                    },
                    "path": {"type": "string", "description": "Absolute path of a file or directory."},
                    "file_text": {"type": "string", "description": "Content of the file, for `create`."},
                    "old_str": {"type": "string", "description": "Exact text to replace, for `str_replace`."},
                    "new_str": {
                        "type": "string",
                        "description": "Replacement (`str_replace`) or inserted text (`insert`).",
                    },
                    "insert_line": {"type": "integer", "description": "Insert after this line (`insert`)."},
                    "view_range": {
                        "type": "array",
                        "items": {"type": "integer"},
                        "description": "[start, end] lines to show a file (`view`); end -1: to the end.",
                    },
                },
                "required": ["command", "path"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "submit",
            "description": "Submit the current state of the repository as your solution and end the task.",
            "parameters": {"type": "object", "properties": {}, "required": []},
        },
    },
)

TOOL_PARAMETERS: dict[str, tuple[str, ...]] = {
    spec["function"]["name"]: tuple(spec["function"]["parameters"]["properties"]) for spec in TOOL_SCHEMAS
}

_BASH_BLOCK_HELP = f"""Every reply must contain exactly ONE bash code block with one command (or commands
joined with && or ||), like this:

Brief reasoning about what to do next.

```bash
grep -rn "def parse" /testbed --include=*.py
```

When you are done, submit with this command on its own (you cannot act after it):

```bash
echo {SUBMIT_WORD}
```"""

_XML_FUNCTION_HELP = """Every reply must contain exactly ONE function call in this format:

<function=bash>
<parameter=command>grep -rn "def parse" /testbed --include=*.py</parameter>
</function>

The functions are bash (command), str_replace_editor (command, path, file_text, old_str, new_str,
insert_line, view_range) and submit (no parameters). For example:

<function=str_replace_editor>
<parameter=command>str_replace</parameter>
<parameter=path>/testbed/pkg/module.py</parameter>
<parameter=old_str>    return a - b</parameter>
<parameter=new_str>    return a + b</parameter>
</function>

When you are done, submit (you cannot act after it):

<function=submit>
</function>"""

_JSON_TOOL_CALL_HELP = """Every reply must contain exactly ONE tool call: a JSON object with "name" and
"arguments" inside <tool_call></tool_call> tags, like this:

<tool_call>
{"name": "bash", "arguments": {"command": "grep -rn \\"def parse\\" /testbed --include=*.py"}}
</tool_call>

The tools are bash (command), str_replace_editor (command, path, file_text, old_str, new_str,
insert_line, view_range) and submit (no arguments). For example:

<tool_call>
{"name": "str_replace_editor", "arguments": {"command": "view", "path": "/testbed/a.py"}}
</tool_call>

When you are done, submit (you cannot act after it):

<tool_call>
{"name": "submit", "arguments": {}}
</tool_call>"""

FORMAT_HELP: dict[str, str] = {
    "bash_block": _BASH_BLOCK_HELP,
    "xml_function": _XML_FUNCTION_HELP,
    "json_tool_call": _JSON_TOOL_CALL_HELP,
}


def tools_json() -> str:
    """The tool schemas as Hermes-style prompts list them inside ``<tools></tools>``: one JSON per line."""
    return "\n".join(json.dumps(spec, ensure_ascii=False) for spec in TOOL_SCHEMAS)


# ------------------------------------------------------------------------------------ writing a call
# The one place a reply is *written* in each style (the expert's and the gold policy's replies, the submit that
# ends an overflowing rollout, the prompts' submit line); actions.py is the one place one is *read*.


def command_reply(command: str, style: str) -> str:
    """The reply that runs ``command`` with the bash tool, in action style ``style``."""
    if style == "bash_block":
        return f"```bash\n{command}\n```"
    if style == "xml_function":
        return f"<function=bash>\n<parameter=command>{command}</parameter>\n</function>"
    if style == "json_tool_call":
        return "<tool_call>\n" + json.dumps({"name": "bash", "arguments": {"command": command}}) + "\n</tool_call>"
    raise ValueError(
        f"action style: expected one of {', '.join(FORMAT_HELP)}; found {style!r}; set env.style to one of them"
    )


SUBMIT_REPLIES: dict[str, str] = {
    "bash_block": command_reply(f"echo {SUBMIT_WORD}", "bash_block"),
    "xml_function": "<function=submit></function>",
    "json_tool_call": '<tool_call>{"name": "submit", "arguments": {}}</tool_call>',
}
"""The reply that submits, per action style."""
