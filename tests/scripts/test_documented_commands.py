"""Every `swebox ...` command that the README, the docs or an error message suggests parses as written.

Commands come from fenced shell blocks of the Markdown files and from backticked spans in Markdown and in the
string literals of the sources. Placeholders stay as they are (`TASKS.jsonl` is a fine path to parse), optional
``[...]`` groups and ``...`` are dropped, ``(A | B)`` is A, and a span without options that names a command
(`swebox cache build`) is a name, not an invocation: it only has to name a real command. A span may leave out
required arguments it does not discuss (`swebox eval --out`), but what it says must be right: an unknown
option, a wrong value or a bad choice fails.
"""

from __future__ import annotations

import ast
import contextlib
import io
import re
import shlex
from pathlib import Path

import pytest
from swebox.scripts.cli import build_parser

REPO = Path(__file__).resolve().parents[2]
SOURCES = ("envs", "trainers", "scripts")
_SPAN = re.compile(r"`(swebox [^`]+)`")


def _fences(text: str) -> tuple[list[str], str]:
    """The shell blocks of a Markdown text, and the text outside every fenced block."""
    shell, outside, block, lang = [], [], None, ""
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            if block is None:
                block, lang = [], line.strip()[3:].strip()
            else:
                if lang in ("", "bash", "sh", "shell", "console"):
                    shell.append("\n".join(block))
                block = None
        elif block is None:
            outside.append(line)
        else:
            block.append(line)
    return shell, "\n".join(outside)


def _markdown_commands(path: Path) -> list[str]:
    shell, prose = _fences(path.read_text())
    found = []
    for block in shell:
        # continued lines: a trailing backslash, or a synopsis's indented second line
        block = re.sub(r"\\\n\s*", " ", block)
        block = re.sub(r"^(swebox .*)\n\s+(--.*)$", r"\1 \2", block, flags=re.M)
        for line in block.splitlines():
            line = re.sub(r"^\s*(\$ |[A-Z_]+=\S+ )+", "", line.strip())  # prompts and VAR=value prefixes
            if line.startswith("swebox "):
                found.append(line.split("  #")[0].split(" # ")[0])
    return found + _SPAN.findall(prose)


def _source_commands(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.JoinedStr):  # f-strings: a placeholder becomes a word
            text = "".join(v.value if isinstance(v, ast.Constant) else "X" for v in node.values)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value
        else:
            continue
        found += _SPAN.findall(text)
    return found


def all_commands() -> list[tuple[str, str]]:
    docs = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    out = [(str(p.relative_to(REPO)), c) for p in docs for c in _markdown_commands(p)]
    for folder in SOURCES:
        for path in sorted((REPO / folder).rglob("*.py")):
            out += [(str(path.relative_to(REPO)), c) for c in _source_commands(path)]
    return sorted(set(out))


def _argv(command: str) -> list[str]:
    command = re.sub(r"\[[^\[\]]*\]", " ", command)  # optional groups
    command = re.sub(r"\(([^()|]*)\|[^()]*\)", r"\1", command)  # (A | B | C): the first alternative
    return [t for t in shlex.split(command)[1:] if t not in ("...", "…")]


def _parse(argv: list[str]) -> str:
    """'' when the arguments parse, else argparse's complaint."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            build_parser().parse_args(argv)
        except SystemExit as exc:
            return "" if exc.code == 0 else err.getvalue().strip().splitlines()[-1]
    return ""


def test_the_extractor_finds_the_readme_commands():
    commands = [c for where, c in all_commands() if where == "README.md"]
    assert any(c.startswith("swebox tasks synth --project toolz==1.2.0") for c in commands)
    assert any(c.startswith("swebox train --config configs/grpo_tiny_cpu.yaml") for c in commands)
    assert len([c for where, c in all_commands() if where.endswith(".py")]) >= 10


# How argparse says that something is missing rather than wrong: a reference in prose to a command and some
# of its options (`swebox eval --out`, `swebox tasks synth --out DIR`) may leave out what it does not discuss.
_INCOMPLETE = ("the following arguments are required", "is required", "expected one argument")


@pytest.mark.parametrize(("where", "command"), all_commands())
def test_suggested_command_parses(where, command):
    argv = _argv(command)
    if any(t.startswith("-") for t in argv):
        problem = _parse(argv)
        if any(p in problem for p in _INCOMPLETE) and (
            not problem.endswith("expected one argument") or argv[-1].startswith("-")
        ):
            problem = ""  # incomplete, not wrong: every option it names exists and takes what it is given
    else:  # a command's name in prose: the words must name a real (sub-)command
        problem = _parse([*argv, "--help"])
    assert problem == "", f"{where}: `{command}` does not parse: {problem}"
