"""The expert policy's turns: inspect the file the gold patch changes, apply the patch, run the failing tests, submit.

Pure text, no model: ``swebox sft`` trains on these turns (trainers/finetune/sft_data.py), ``swebox eval --policy
gold`` and ``swebox tasks calibrate --policy gold`` play them. Kept in the agent layer, free of torch, so the
torch-free installs (the Python 3.12/3.13 test venvs) can play the gold policy.
"""

from __future__ import annotations

import re
import shlex
from typing import Any

from swebox.envs.agent.formats import SUBMIT_REPLIES, command_reply

HEREDOC = "SWEBOX_GOLD_PATCH_EOF"
_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@", re.MULTILINE)  # old and new start, count
_OLD_FILE = re.compile(r"^--- a/(\S+)", re.MULTILINE)


def zero_context(patch: str) -> str | None:
    """``patch`` with no context lines (``diff -U0``), or None where it cannot be shortened safely.

    Each run of removed/added lines becomes a hunk of its own; ``git apply --unidiff-zero`` applies it. The
    ``---``/``+++`` headers are kept (``diff --git`` and ``index`` lines are not needed). A patch that creates,
    deletes, renames or marks a missing final newline is left alone (None): it needs its full form.
    """
    if re.search(r"^(new file|deleted file|rename |similarity |Binary |\\ No newline)", patch, re.MULTILINE):
        return None
    out: list[str] = []
    old_left = new_left = 0  # lines of the current hunk still to read (its header's counts)
    src = tgt = 0  # the next line's numbers in the old and the new file
    run: list[str] = []
    run_at = (0, 0)

    def flush() -> None:
        removed = [line for line in run if line.startswith("-")]
        added = [line for line in run if line.startswith("+")]
        old_start, new_start = run_at[0] if removed else run_at[0] - 1, run_at[1] if added else run_at[1] - 1
        out.extend([f"@@ -{_range(old_start, len(removed))} +{_range(new_start, len(added))} @@", *removed, *added])
        run.clear()

    for line in patch.split("\n"):  # git's lines: str.splitlines also breaks on \f, \x85, ...
        if old_left or new_left:  # inside a hunk
            if line.startswith(("-", "+")):
                run_at = run_at if run else (src, tgt)
                run.append(line)
            elif run:
                flush()
            minus, plus = line.startswith("-"), line.startswith("+")
            src, old_left = (src + 1, old_left - 1) if not plus else (src, old_left)
            tgt, new_left = (tgt + 1, new_left - 1) if not minus else (tgt, new_left)
            if not (old_left or new_left) and run:
                flush()
            continue
        hunk = _HUNK.match(line)
        if hunk:
            src, old_left = int(hunk.group(1)), int(hunk.group(2) or 1)
            tgt, new_left = int(hunk.group(3)), int(hunk.group(4) or 1)
        elif line.startswith(("--- ", "+++ ")):
            out.append(line)
    return "\n".join(out) + "\n"


def _range(start: int, count: int) -> str:
    """A hunk header's range as git writes it: the count left out when it is 1."""
    return str(start) if count == 1 else f"{start},{count}"


def apply_command(patch: str, minimal: bool = False) -> str:
    """Write ``patch`` to a file with a heredoc and ``git apply`` it in /testbed.

    ``minimal``: the patch without context lines (:func:`zero_context`), applied with ``--unidiff-zero``, so
    the turn is about half as long; a patch that cannot be shortened is applied whole.
    """
    short = zero_context(patch) if minimal else None
    body, flags = (short, " --unidiff-zero") if short else (patch, "")
    return f"cat > /tmp/gold.diff <<'{HEREDOC}'\n{body}{HEREDOC}\ncd /testbed && git apply{flags} /tmp/gold.diff"


def inspect_command(patch: str) -> str:
    """Show the lines of the first file the patch changes, around its first hunk (what an engineer reads)."""
    path, hunk = _OLD_FILE.search(patch), _HUNK.search(patch)
    if path is None or hunk is None:
        return "cd /testbed && git status --short"
    start, length = int(hunk.group(1)), int(hunk.group(2) or 1)
    return f"cd /testbed && sed -n '{max(1, start)},{start + max(length, 1) - 1}p' {shlex.quote(path.group(1))}"


def expert_replies(task: Any, style: str = "bash_block", minimal_patch: bool = False) -> list[str]:
    """The expert's turns for ``task``: inspect, apply the gold patch, run the failing tests, submit.

    The tests are run only when they are in the sandbox (``hidden_tests`` tasks, SWE-bench's, add them at grading).
    ``minimal_patch``: apply it without context lines (:func:`apply_command`).
    """
    commands = [inspect_command(task.patch), apply_command(task.patch, minimal_patch)]
    if task.FAIL_TO_PASS and not task.hidden_tests:
        commands.append(f"cd /testbed && {task.test_cmd} -q " + " ".join(shlex.quote(t) for t in task.FAIL_TO_PASS))
    return [*(command_reply(c, style) for c in commands), SUBMIT_REPLIES[style]]
