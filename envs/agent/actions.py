"""Turning a model's reply into one tool call, in the action style an environment is configured for.

Three styles, each the convention of a known agent scaffold:

- ``bash_block`` (mini-swe-agent): the reply holds exactly one fenced ```` ```bash ```` block; its body is a
  ``bash`` command. A command whose first line is ``echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`` submits.
- ``xml_function`` (SWE-agent, R2E-Gym, Qwen3-Coder): ``<function=NAME><parameter=KEY>VALUE</parameter>
  </function>``, optionally wrapped in ``<tool_call>...</tool_call>``.
- ``json_tool_call`` (Hermes / Qwen2.5): ``<tool_call>{"name": NAME, "arguments": {...}}</tool_call>`` in
  the text, or an OpenAI chat message (a dict) whose ``tool_calls`` list holds one call with its
  ``arguments`` as a JSON string.

In every style the tools are ``bash`` (``command``), ``str_replace_editor`` (``command``, ``path``,
``file_text``, ``old_str``, ``new_str``, ``insert_line``, ``view_range``) and ``submit``. ``parse_action``
never raises for anything a model can write: a malformed reply yields a ``FormatError`` whose ``message``
says what was wrong and shows the expected format; it becomes the turn's observation.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from swebox.envs.agent.formats import FORMAT_HELP, SUBMIT_SENTINEL, TOOL_PARAMETERS

ActionStyle = Literal["bash_block", "xml_function", "json_tool_call"]
STYLES: tuple[str, ...] = ("bash_block", "xml_function", "json_tool_call")
EDITOR_COMMANDS: tuple[str, ...] = ("view", "create", "str_replace", "insert", "undo_edit")
THINK_END = "</think>"


@dataclass(frozen=True)
class ActionConfig:
    """How replies are parsed into actions and how the tools run them."""

    style: ActionStyle = "bash_block"
    """Which convention replies follow: "bash_block", "xml_function" or "json_tool_call"."""
    max_reply_chars: int = 100_000
    """Replies longer than this are rejected as a format error instead of being parsed."""
    command_timeout_s: float = 60.0
    """Wall-clock limit of one bash command; on expiry the command is killed and the episode goes on."""
    skip_thinking: bool = True
    """Parse only the text after the last ``</think>`` (reasoning models may quote example calls there)."""

    def __post_init__(self) -> None:
        if self.style not in STYLES:
            raise ValueError(
                f"ActionConfig.style: expected one of {', '.join(STYLES)}; found {self.style!r}. "
                "Fix the `style` setting of the environment's action config."
            )
        if self.max_reply_chars < 1:
            raise ValueError(
                f"ActionConfig.max_reply_chars: expected a positive number of characters; found "
                f"{self.max_reply_chars}. Use e.g. 100000."
            )
        if not self.command_timeout_s > 0:
            raise ValueError(
                f"ActionConfig.command_timeout_s: expected a positive number of seconds; found "
                f"{self.command_timeout_s}. Use e.g. 60."
            )


@dataclass(frozen=True)
class Action:
    """One validated tool call: the tool's name and its arguments (typed: insert_line is an int...)."""

    tool: str
    """"bash", "str_replace_editor" or "submit"."""
    arguments: dict[str, Any] = field(default_factory=dict)
    """The call's arguments after validation, e.g. {"command": "ls"} for bash."""
    call_id: str | None = None
    """The id of an OpenAI ``tool_calls`` entry, so the observation can answer it; None otherwise."""


@dataclass(frozen=True)
class FormatError:
    """A reply that holds no single valid tool call. ``message`` is the observation to show the model."""

    reason: str
    """What was wrong, in one sentence (also useful in logs)."""
    message: str
    """The full observation: the reason plus the expected format for the configured style."""


def parse_action(reply: object, config: ActionConfig) -> Action | FormatError:
    """Parse one model reply (a string, or an OpenAI chat message dict) into an ``Action``.

    Never raises for any reply: every problem is returned as a ``FormatError``.
    """
    try:
        text, tool_calls = _split_message(reply)
        size = len(text) + (len(json.dumps(tool_calls, default=str)) if tool_calls else 0)
        if size > config.max_reply_chars:
            return _error(
                f"your reply is {size} characters long, more than the limit of "
                f"{config.max_reply_chars}; keep replies short and put one action in each",
                config.style,
            )
        if config.skip_thinking and THINK_END in text:
            text = text[text.rindex(THINK_END) + len(THINK_END) :]
        if config.style == "bash_block":
            found = _parse_bash_block(text)
        elif config.style == "xml_function":
            found = _parse_xml_function(text)
        else:
            found = _parse_json_tool_call(text, tool_calls)
        if isinstance(found, str):
            return _error(found, config.style)
        name, raw_args, call_id = found
        validated = _validate(name, raw_args)
        if isinstance(validated, str):
            return _error(validated, config.style)
        return Action(validated.tool, validated.arguments, call_id)
    except Exception as exc:  # a parser bug must still not crash an episode; show it as a format error
        return _error(f"the reply could not be parsed ({type(exc).__name__}: {exc})", config.style)


def _error(reason: str, style: str) -> FormatError:
    message = f"Format error: {reason}.\n\n{FORMAT_HELP[style]}"
    return FormatError(reason=reason, message=message)


def _split_message(reply: object) -> tuple[str, list[Any] | None]:
    """The reply's text and, for an OpenAI chat message, its ``tool_calls`` list."""
    if isinstance(reply, str):
        return reply, None
    if isinstance(reply, Mapping):
        content = reply.get("content")
        if isinstance(content, list):  # content parts: [{"type": "text", "text": ...}, ...]
            content = "".join(p.get("text", "") for p in content if isinstance(p, Mapping))
        text = content if isinstance(content, str) else ""
        calls = reply.get("tool_calls")
        return text, (list(calls) if isinstance(calls, list | tuple) and calls else None)
    raise TypeError(f"a reply must be a string or a chat message dict, not {type(reply).__name__}")


# ---- bash_block ------------------------------------------------------------------------------------------
# The fence is ```bash at a line start, then the body up to a closing ``` on its own line (mini-swe-agent's
# regex also accepts a body ending right before ```; so do we).
_BASH_BLOCK = re.compile(r"```bash[ \t]*\n(.*?)\n?```", re.DOTALL)
_ANY_FENCE = re.compile(r"```([A-Za-z0-9_+-]*)")


def _parse_bash_block(text: str) -> tuple[str, dict[str, Any], None] | str:
    blocks = _BASH_BLOCK.findall(text)
    if len(blocks) == 1:
        return "bash", {"command": blocks[0]}, None
    if len(blocks) > 1:
        return f"found {len(blocks)} ```bash blocks; reply with exactly one"
    openings = _ANY_FENCE.findall(text)[::2]  # fences alternate: opening, closing, opening, ...
    if "bash" in openings:
        return "the ```bash block is not closed: put the command on the lines after ```bash and end with ```"
    if openings:
        langs = ", ".join(sorted({lang or "(no language)" for lang in openings}))
        return f"found no ```bash block (code blocks found: {langs}); the block must start with ```bash"
    return "found no ```bash block; every reply must contain exactly one"


# ---- xml_function ----------------------------------------------------------------------------------------
_XML_FUNCTION = re.compile(r"<function\s*=\s*([^>\s]*)\s*>(.*?)</function>", re.DOTALL)
_XML_PARAMETER = re.compile(r"<parameter\s*=\s*([^>\s]*)\s*>(.*?)</parameter>", re.DOTALL)
_XML_OPEN = re.compile(r"<function\s*=")


def _parse_xml_function(text: str) -> tuple[str, dict[str, Any], None] | str:
    calls = _XML_FUNCTION.findall(text)
    if len(calls) > 1:
        return f"found {len(calls)} <function=...> calls; reply with exactly one"
    if not calls:
        if _XML_OPEN.search(text):
            return "found <function=...> without a closing </function>"
        return "found no <function=...> call; every reply must contain exactly one"
    name, body = calls[0]
    args: dict[str, Any] = {}
    for key, value in _XML_PARAMETER.findall(body):
        if key in args:
            return f"parameter {key!r} is given twice"
        args[key] = _strip_one_newline(value)
    if body.count("<parameter") != len(args):
        return "a <parameter=...> tag is not closed with </parameter>"
    return name, args, None


def _strip_one_newline(value: str) -> str:
    """Drop one newline after the opening and before the closing tag (Qwen3-Coder puts values on their own
    lines); further whitespace is content, since old_str/new_str must match indentation exactly."""
    if value.startswith("\n"):
        value = value[1:]
    if value.endswith("\n"):
        value = value[:-1]
    return value


# ---- json_tool_call --------------------------------------------------------------------------------------
_TOOL_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)


def _parse_json_tool_call(text: str, tool_calls: list[Any] | None) -> tuple[str, dict[str, Any], str | None] | str:
    if tool_calls is not None:
        return _parse_openai_tool_calls(tool_calls)
    bodies = _TOOL_CALL.findall(text)
    if len(bodies) > 1:
        return f"found {len(bodies)} <tool_call> blocks; reply with exactly one"
    if not bodies:
        if "<tool_call>" in text:
            return "found <tool_call> without a closing </tool_call>"
        return "found no <tool_call> block; every reply must contain exactly one"
    try:
        call = json.loads(bodies[0])
    except json.JSONDecodeError as exc:
        return f"the <tool_call> body is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"
    if not isinstance(call, dict) or not isinstance(call.get("name"), str):
        return 'the <tool_call> body must be a JSON object with a string "name" and an "arguments" object'
    arguments = call.get("arguments", {})
    if isinstance(arguments, str):  # some models double-encode the arguments, as OpenAI messages do
        arguments = _loads_object(arguments)
        if isinstance(arguments, str):
            return arguments
    if not isinstance(arguments, dict):
        return f'"arguments" must be a JSON object; found {type(arguments).__name__}'
    return call["name"], arguments, None


def _parse_openai_tool_calls(tool_calls: list[Any]) -> tuple[str, dict[str, Any], str | None] | str:
    if len(tool_calls) != 1:
        return f"the message has {len(tool_calls)} tool calls; make exactly one per turn"
    call = tool_calls[0]
    function = call.get("function") if isinstance(call, Mapping) else None
    if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
        return 'a tool call must look like {"type": "function", "function": {"name": ..., "arguments": ...}}'
    arguments = function.get("arguments") or {}
    if isinstance(arguments, str):
        arguments = _loads_object(arguments)
        if isinstance(arguments, str):
            return arguments
    if not isinstance(arguments, Mapping):
        return f'"arguments" must be a JSON object; found {type(arguments).__name__}'
    call_id = call.get("id")
    return function["name"], dict(arguments), (call_id if isinstance(call_id, str) else None)


def _loads_object(text: str) -> dict[str, Any] | str:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        return f'"arguments" is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})'
    if not isinstance(value, dict):
        return f'"arguments" must be a JSON object; found {type(value).__name__}'
    return value


# ---- validation, shared by all styles --------------------------------------------------------------------
def _validate(name: str, args: dict[str, Any]) -> Action | str:
    if name not in TOOL_PARAMETERS:
        return f"unknown tool {name!r}; the tools are {', '.join(TOOL_PARAMETERS)}"
    if name == "submit":
        return Action("submit", {})  # arguments of submit carry nothing we use; ignore them
    unexpected = sorted(set(args) - set(TOOL_PARAMETERS[name]))
    if unexpected:
        return (
            f"unexpected parameter(s) {', '.join(map(repr, unexpected))} for {name}; "
            f"its parameters are {', '.join(TOOL_PARAMETERS[name])}"
        )
    for key, value in args.items():
        problem = _bad_text(key, value)
        if problem:
            return problem
    if name == "bash":
        return _validate_bash(args)
    return _validate_editor(args)


def _bad_text(key: str, value: Any) -> str | None:
    """Strings must be valid UTF-8 and hold no NUL, which no shell or file API here can pass through."""
    if not isinstance(value, str):
        return None
    if "\x00" in value:
        return f"parameter {key!r} contains a NUL character, which cannot be passed to a shell or file"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return f"parameter {key!r} contains text that is not valid Unicode (a lone surrogate)"
    return None


def _validate_bash(args: dict[str, Any]) -> Action | str:
    command = args.get("command")
    if not isinstance(command, str):
        return 'bash needs a string parameter "command"'
    if not command.strip():
        return "the bash command is empty"
    first_line = command.strip().splitlines()[0].strip()
    if SUBMIT_SENTINEL.match(first_line):
        return Action("submit", {})
    return Action("bash", {"command": command})


_REQUIRED_BY_COMMAND = {
    "view": ("path",),
    "create": ("path", "file_text"),
    "str_replace": ("path", "old_str"),
    "insert": ("path", "insert_line", "new_str"),
    "undo_edit": ("path",),
}


def _validate_editor(args: dict[str, Any]) -> Action | str:
    command = args.get("command")
    if command not in EDITOR_COMMANDS:
        allowed = ", ".join(EDITOR_COMMANDS)
        return f"str_replace_editor's \"command\" must be one of {allowed}; found {command!r}"
    missing = [key for key in _REQUIRED_BY_COMMAND[command] if args.get(key) is None]
    if missing:
        return f"str_replace_editor {command} needs parameter(s) {', '.join(map(repr, missing))}"
    out: dict[str, Any] = {"command": command}
    for key in ("path", "file_text", "old_str", "new_str"):
        if args.get(key) is not None:
            if not isinstance(args[key], str):
                return f"parameter {key!r} must be a string; found {type(args[key]).__name__}"
            out[key] = args[key]
    if args.get("insert_line") is not None:
        line = _as_int(args["insert_line"])
        if line is None:
            return f"insert_line must be a whole number; found {args['insert_line']!r}"
        out["insert_line"] = line
    if args.get("view_range") is not None:
        view_range = _as_range(args["view_range"])
        if view_range is None:
            found = args["view_range"]
            return f"view_range must be two whole numbers like [1, 40] (-1 for the end); found {found!r}"
        out["view_range"] = view_range
    return Action("str_replace_editor", out)


def _as_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and re.fullmatch(r"\s*-?\d+\s*", value):
        return int(value)
    return None


def _as_range(value: Any) -> list[int] | None:
    """A view range from a list, or from XML's text form "[1, 40]" (also "1,40" or "1 40")."""
    if isinstance(value, str):
        text = value.strip().strip("[]()")
        parts = [p for p in re.split(r"[\s,]+", text) if p]
        value = parts
    if not isinstance(value, list | tuple) or len(value) != 2:
        return None
    numbers = [_as_int(v) for v in value]
    if any(n is None for n in numbers):
        return None
    return [int(n) for n in numbers if n is not None]
