"""Reverse a unified git diff: the diff that undoes it (SWE-smith stores the bug; a task's ``patch`` is the fix).

Section by section, as :mod:`swebox.envs.tasks.graders.diff_parse` splits it: paths, modes and renames swap
sides, each hunk's removals and additions trade places in git's order, and a binary patch's two blocks swap.
"""

from __future__ import annotations

import re

from swebox.envs.tasks.graders.diff_parse import HEADER_PREFIXES, FilePatch, diff_lines, parse_diff

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@(.*)$")


def _reverse_hunk(lines: list[str]) -> list[str]:
    """Swap the sides of one hunk, keeping git's order (removals before additions in each change block)."""
    head = _HUNK.match(lines[0].rstrip("\n"))
    if head is None:
        raise ValueError(f"reverse_diff: expected a hunk header '@@ -a,b +c,d @@'; found {lines[0]!r}.")
    a, b, c, d, section = head.groups()
    out = [f"@@ -{c}{',' + d if d is not None else ''} +{a}{',' + b if b is not None else ''} @@{section}\n"]
    # Each line carries its '\ No newline' marker along when it moves.
    items: list[str] = []
    for line in lines[1:]:
        if line.startswith("\\") and items:
            items[-1] += line
        else:
            items.append(line)
    minus: list[str] = []
    plus: list[str] = []
    for item in [*items, None]:
        if item is not None and item[:1] in ("+", "-"):
            flipped = ("-" if item[0] == "+" else "+") + item[1:]
            (minus if flipped[0] == "-" else plus).append(flipped)
            continue
        out += minus + plus
        minus, plus = [], []
        if item is not None:
            out.append(item)
    return out


def _swap_binary(lines: list[str]) -> list[str]:
    """A git binary patch holds the forward block then the reverse block; swap them."""
    body = lines[1:]
    blocks: list[list[str]] = [[]]
    for line in body:
        if line == "\n":
            blocks.append([])
        else:
            blocks[-1].append(line)
    blocks = [b for b in blocks if b]
    if len(blocks) != 2:
        raise ValueError(
            "reverse_diff: a binary patch without its reverse block cannot be reversed; "
            "produce it with `git diff --binary`."
        )
    return [lines[0], *blocks[1], "\n", *blocks[0], "\n"]


def _reverse_section(patch: FilePatch) -> str:
    lines = diff_lines(patch.text)
    old, new = patch.old_path, patch.new_path
    out: list[str] = []
    i = 0
    if lines[0].startswith("diff --git "):
        out.append(f"diff --git a/{new or old} b/{old or new}\n")
        i = 1
    swaps = {
        "old mode ": "new mode ",
        "new mode ": "old mode ",
        "new file mode ": "deleted file mode ",
        "deleted file mode ": "new file mode ",
        "rename from ": "rename to ",
        "rename to ": "rename from ",
    }
    header: list[str] = []
    while i < len(lines) and lines[i].startswith(HEADER_PREFIXES):
        line = lines[i]
        prefix = next((p for p in swaps if line.startswith(p)), None)
        if line.startswith(("copy from ", "copy to ")):
            raise ValueError("reverse_diff: a copy cannot be reversed into a diff; expected no 'copy from'.")
        if prefix:
            line = swaps[prefix] + line[len(prefix) :]
        elif line.startswith("index "):
            ids, *mode = line[len("index ") :].split(" ", 1)
            left, _, right = ids.partition("..")
            line = f"index {right.rstrip(chr(10))}..{left}" + (f" {mode[0]}" if mode else "\n")
        header.append(line)
        i += 1
    # git wants 'rename from' before 'rename to' and 'old mode' before 'new mode'.
    order = {"old mode ": 0, "new mode ": 1, "rename from ": 2, "rename to ": 3}
    header.sort(key=lambda h: next((v for k, v in order.items() if h.startswith(k)), -1))
    out += header
    if i < len(lines) and lines[i].startswith("--- "):
        out.append("--- " + (f"a/{new}" if new else "/dev/null") + "\n")
        out.append("+++ " + (f"b/{old}" if old else "/dev/null") + "\n")
        i += 2
    if i < len(lines) and lines[i].startswith("GIT binary patch"):
        return "".join(out + _swap_binary(lines[i:]))
    if i < len(lines) and lines[i].startswith("Binary files "):
        return "".join(
            out
            + [f"Binary files {'a/' + new if new else '/dev/null'} and {'b/' + old if old else '/dev/null'} differ\n"]
        )
    while i < len(lines):
        end = i + 1
        while end < len(lines) and not lines[end].startswith("@@ "):
            end += 1
        out += _reverse_hunk(lines[i:end])
        i = end
    return "".join(out)


def reverse_diff(text: str) -> str:
    """The diff that undoes ``text`` (SWE-smith stores the bug; a task's ``patch`` is the fix)."""
    return "".join(_reverse_section(p) for p in parse_diff(text))
