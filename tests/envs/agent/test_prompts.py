"""Prompts: each style's system prompt teaches exactly the format its parser accepts."""

from __future__ import annotations

import json
import re

import pytest
from swebox.envs.agent.actions import Action, ActionConfig, parse_action
from swebox.envs.agent.formats import FORMAT_HELP, TOOL_SCHEMAS
from swebox.envs.agent.prompts import system_prompt, task_prompt


@pytest.mark.parametrize("style", ["bash_block", "xml_function", "json_tool_call"])
def test_system_prompt_ends_with_the_format_help_of_its_style(style):
    assert system_prompt(style).endswith(FORMAT_HELP[style])


def test_json_system_prompt_lists_the_tool_schemas_in_a_tools_block():
    prompt = system_prompt("json_tool_call")
    block = re.search(r"<tools>\n(.*?)\n</tools>", prompt, re.DOTALL)
    assert block is not None
    assert [json.loads(line) for line in block.group(1).splitlines()] == list(TOOL_SCHEMAS)
    assert "<tools>" not in system_prompt("xml_function")


@pytest.mark.parametrize("style", ["bash_block", "xml_function", "json_tool_call"])
def test_examples_in_the_format_help_parse_and_the_last_one_submits(style):
    """Every example the prompt shows must be something the parser accepts; the last one submits."""
    help_text = FORMAT_HELP[style]
    if style == "bash_block":
        examples = re.findall(r"```bash\n.*?\n```", help_text, re.DOTALL)
    elif style == "xml_function":
        examples = re.findall(r"<function=.*?</function>", help_text, re.DOTALL)
    else:
        examples = re.findall(r"<tool_call>\n.*?</tool_call>", help_text, re.DOTALL)  # not the prose tags
    assert len(examples) >= 2
    parsed = [parse_action(example, ActionConfig(style=style)) for example in examples]
    assert all(isinstance(p, Action) for p in parsed), parsed
    assert parsed[-1] == Action("submit", {})
    assert all(p.tool != "submit" for p in parsed[:-1])


def test_task_prompt_carries_statement_repo_budget_and_submit_instruction():
    prompt = task_prompt("  Fix the parser.\n", "bash_block", repo_dir="/testbed", max_turns=30)
    assert "<issue>\nFix the parser.\n</issue>" in prompt
    assert "checked out at /testbed" in prompt
    assert "at most 30 turns" in prompt
    assert prompt.endswith(
        "When you are done, submit with `echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT` as the only command of "
        "your reply. Your changes to the repository are your answer; you cannot act after that."
    )
    assert "turns" not in task_prompt("x", "xml_function").split("</issue>")[1].split("time limit")[0]
    assert task_prompt("x", "xml_function").endswith("call <function=submit></function>. You cannot act after that.")
    submit_json = task_prompt("x", "json_tool_call").rsplit("submit: ", 1)[1]
    assert parse_action(submit_json, ActionConfig(style="json_tool_call")) == Action("submit", {})


def test_unknown_style_is_refused():
    with pytest.raises(ValueError, match="expected one of bash_block, xml_function, json_tool_call; found 'yaml'"):
        system_prompt("yaml")
