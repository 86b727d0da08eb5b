"""git's own reading of a diff, the ground truth for what applying it touches.

:func:`swebox.envs.tasks.diffs.filter_diff` decides per section with its own parser; ``git apply`` has another.
Wherever the two read a diff differently (where a binary patch ends, a CR at the end of a path, a mode written
``0120000``), a section the filter judged is not the section git applies. So before anything is applied, git
parses the diff in the grading sandbox (``git apply --recount --numstat --summary -z``, forward and reversed, which
names every path a section creates, changes, deletes or renames from) and:

- the whole diff is refused when git's paths are not exactly the filter's (as multisets), or git cannot read it;
- the filtered diff is refused when any path git would touch is protected, or git would create a symlink or a
  submodule.

Refusing is reward 0 with the reason; nothing of such a diff is applied.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable
from dataclasses import dataclass, field

from swebox.envs.tasks.diffs import FilteredDiff, parse_diff, protected_reason, special_mode

_MODE_LINE = re.compile(r"^ (?:create|delete) mode (\d+) |^ mode change (\d+) => (\d+) ", re.MULTILINE)


@dataclass
class GitReading:
    """What git says a diff touches."""

    paths: list[str] = field(default_factory=list)
    """Per section, the path after the change (the old one for a deletion)."""
    old_paths: list[str] = field(default_factory=list)
    """Per section, the path before the change (the new one for a creation); from the reversed parse."""
    modes: list[str] = field(default_factory=list)
    """Every file mode git's summary names (created, deleted, changed)."""
    error: str = ""
    """git's message when it could not read the diff."""


def _numstat_paths(output: str) -> tuple[list[str], str]:
    """(paths, summary text) of ``--numstat -z`` output: ``added TAB deleted TAB path NUL`` entries, then text."""
    *entries, rest = output.split("\0")
    return [e.split("\t", 2)[2] for e in entries if e.count("\t") >= 2], rest


def read_with_git(sb, diff_file: str) -> GitReading:
    """git's reading of the diff in ``diff_file`` (a path inside the sandbox ``sb``)."""
    q = shlex.quote(diff_file)
    forward = sb.exec(f"cd /testbed && git apply --recount --numstat --summary -z {q} 2>/dev/null", 60)
    if forward.exit_code != 0:
        why = sb.exec(f"cd /testbed && git apply --recount --numstat {q} 2>&1 >/dev/null", 60).output.strip()
        return GitReading(error=why.splitlines()[-1] if why else f"git apply exited with {forward.exit_code}")
    paths, summary = _numstat_paths(forward.output)
    reverse = sb.exec(f"cd /testbed && git apply --recount -R --numstat -z {q} 2>/dev/null", 60)
    old_paths, _ = _numstat_paths(reverse.output)
    modes = [m for groups in _MODE_LINE.findall(summary) for m in groups if m]
    return GitReading(paths, old_paths, modes)


def disagreement(full_text: str, reading: GitReading) -> str:
    """Why git's reading of the whole agent diff differs from the filter's parser ('' when it does not)."""
    sections = parse_diff(full_text)
    if reading.error:
        # text that neither parser finds a section in (prose, an empty diff) applies nothing: not refused
        return f"git cannot read the diff: {reading.error}" if sections else ""
    ours = sorted(p.new_path or p.old_path or "" for p in sections)
    ours_old = sorted(p.old_path or p.new_path or "" for p in sections)
    if sorted(reading.paths) != ours or sorted(reading.old_paths) != ours_old:
        return (
            f"git reads the diff's sections differently from the filter: git sees {sorted(reading.paths)!r}, "
            f"the filter {ours!r}; produce the diff with `git diff --binary`"
        )
    return ""


def refusal(reading: GitReading, test_files: Iterable[str], own: frozenset[str] = frozenset()) -> str:
    """Why the filtered diff, as git reads it, must not be applied ('' when it may)."""
    if reading.error:
        return f"git cannot read the filtered diff: {reading.error}"
    test_files = list(test_files)
    for path in dict.fromkeys([*reading.paths, *reading.old_paths]):
        reason = protected_reason(path, test_files, own)
        if reason:
            return f"git would change a protected path: {reason}: {path!r}"
    for mode in reading.modes:
        kind = special_mode(mode)
        if kind:
            return f"a section writes a {kind} (mode {mode})"
    return ""


def judge(sb, workdir: str, full_text: str, filtered: FilteredDiff, test_files: Iterable[str],
          own: frozenset[str] = frozenset()) -> str:
    """The shared grading step: '' when ``filtered`` may be applied, else why the whole diff is refused.

    Writes ``workdir/full.diff`` (the agent's diff) and ``workdir/agent.diff`` (the filtered one, which the
    caller then applies).
    """
    sb.write_file(f"{workdir}/full.diff", encode_diff(full_text))
    sb.write_file(f"{workdir}/agent.diff", encode_diff(filtered.text))
    if not full_text.strip():
        return ""
    full = read_with_git(sb, f"{workdir}/full.diff")
    why = disagreement(full_text, full)
    if why or not filtered.text:
        return why
    same = full_text == filtered.text
    return refusal(full if same else read_with_git(sb, f"{workdir}/agent.diff"), test_files, own)


def encode_diff(text: str) -> bytes:
    """The bytes of an agent's diff; never raises (lone surrogates an agent's text may hold become '?')."""
    try:
        return text.encode("utf-8", errors="surrogateescape")
    except UnicodeEncodeError:
        return text.encode("utf-8", errors="replace")
