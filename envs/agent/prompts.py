"""The first messages of an episode: a system prompt saying how to act in the configured action style, and a
task prompt with the problem statement, where the repository is, and how to submit. Pure functions.
"""

from __future__ import annotations

from swebox.envs.agent.actions import STYLES
from swebox.envs.agent.formats import FORMAT_HELP, SUBMIT_REPLIES, SUBMIT_WORD, tools_json


def system_prompt(style: str) -> str:
    """The system message for ``style`` ("bash_block", "xml_function" or "json_tool_call")."""
    _check_style(style)
    intro = (
        "You are a software engineer working in a Linux machine through tools. You fix issues in a Python "
        "repository by reading code, running commands and editing files, one action per reply.\n\n"
    )
    if style == "json_tool_call":
        # Hermes-style models were trained to read the tool schemas from a <tools> block.
        intro += (
            "You may call one of these functions; their signatures are inside <tools></tools> tags:\n"
            f"<tools>\n{tools_json()}\n</tools>\n\n"
        )
    return intro + FORMAT_HELP[style]


def task_prompt(problem_statement: str, style: str, repo_dir: str = "/testbed", max_turns: int | None = None) -> str:
    """The first user message: the issue to fix and how the work is judged and submitted."""
    _check_style(style)
    budget = f"You have at most {max_turns} turns (one action each). " if max_turns else ""
    return (
        f"The repository is checked out at {repo_dir}; its Python environment is active (`python` and "
        f"`pytest` work from {repo_dir}). Fix this issue:\n\n"
        f"<issue>\n{problem_statement.strip()}\n</issue>\n\n"
        "Change the non-test source files so that the issue is resolved. Hidden tests will check your "
        "change, so keep the existing behaviour working. A good way to work: find the relevant code, "
        "reproduce the problem with a small script, fix it, check the fix, run the related tests.\n\n"
        f"{budget}Each command has a time limit; avoid interactive programs (editors, pagers) and "
        "commands that never end.\n\n"
        f"{_how_to_submit(style)}"
    )


def _how_to_submit(style: str) -> str:
    if style == "bash_block":
        return (
            f"When you are done, submit with `echo {SUBMIT_WORD}` as the only "
            "command of your reply. Your changes to the repository are your answer; you cannot act after "
            "that."
        )
    if style == "xml_function":
        return f"When you are done, call {SUBMIT_REPLIES[style]}. You cannot act after that."
    return f"When you are done, call submit: {SUBMIT_REPLIES[style]}"


def _check_style(style: str) -> None:
    if style not in STYLES:
        raise ValueError(f"action style: expected one of {', '.join(STYLES)}; found {style!r}.")
