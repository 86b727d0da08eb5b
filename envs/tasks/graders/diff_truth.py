"""git's own reading of a diff, the ground truth for what applying it touches.

:func:`swebox.envs.tasks.graders.diffs.filter_diff` decides per section with its own parser; ``git apply`` has another.
Wherever the two read a diff differently (where a binary patch ends, a CR at the end of a path, a mode written
``0120000``, a line git does not end where ``str.splitlines`` would), a section the filter judged is not the
section git applies. So before anything is applied, git parses the diff in the grading sandbox (``git apply
--recount --numstat --summary -z``, forward and reversed) and:

- the whole diff is refused when git's reading is not the filter's, section by section in order: the path
  after and before the change, the added and deleted line counts (``-`` for binary) and the modes git's
  summary names (created, deleted, changed), or when git cannot read it;
- the filtered diff (the text that is applied) is read by git again and must be, section by section, the
  filter's kept sections: so each kept section is applied exactly as git read it within the agent's diff;
- the filtered diff is refused when any path git would touch is protected, or git would create a symlink or a
  submodule.

Refusing is reward 0 with the reason; nothing of such a diff is applied.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable
from dataclasses import dataclass, field

from swebox.envs.tasks.graders.diff_parse import FilePatch, parse_diff
from swebox.envs.tasks.graders.diffs import FilteredDiff, protected_reason, special_mode

_MODE_LINE = re.compile(r"^ (?:create|delete) mode (\d+) |^ mode change (\d+) => (\d+)", re.MULTILINE)
_SUMMARY_LINE = re.compile(r"^ (create|delete) mode (\d+) |^ mode change (\d+) => (\d+)", re.MULTILINE)


@dataclass
class GitReading:
    """What git says a diff touches."""

    paths: list[str] = field(default_factory=list)
    """Per section, the path after the change (the old one for a deletion)."""
    old_paths: list[str] = field(default_factory=list)
    """Per section, the path before the change (the new one for a creation); from the reversed parse."""
    modes: list[str] = field(default_factory=list)
    """Every file mode git's summary names (created, deleted, changed)."""
    counts: list[tuple[str, str]] = field(default_factory=list)
    """Per section, (added, deleted) lines as git counts them; ('-', '-') for a binary section."""
    old_counts: list[tuple[str, str]] = field(default_factory=list)
    """The same from the reversed parse (added and deleted swapped back), section by section."""
    summary: list[str] = field(default_factory=list)
    """git's summary lines that name modes, in order, normalised as :attr:`FilePatch.summary`."""
    error: str = ""
    """git's message when it could not read the diff."""


def _numstat(output: str) -> tuple[list[tuple[str, str, str]], str]:
    """((added, deleted, path) per section, summary text) of ``--numstat -z`` output: ``added TAB deleted TAB
    path NUL`` entries, then the summary's text."""
    *entries, rest = output.split("\0")
    rows = []
    for entry in entries:
        parts = entry.split("\t", 2)
        rows.append((parts[0], parts[1], parts[2]) if len(parts) == 3 else ("?", "?", entry))
    return rows, rest


def _summary(text: str) -> list[str]:
    out = []
    for kind, mode, old, new in _SUMMARY_LINE.findall(text):
        out.append(f"{kind} {mode}" if kind else f"change {old} {new}")
    return out


def read_with_git(sb, diff_file: str) -> GitReading:
    """git's reading of the diff in ``diff_file`` (a path inside the sandbox ``sb``)."""
    q = shlex.quote(diff_file)
    forward = sb.exec(f"cd /testbed && git apply --recount --numstat --summary -z {q} 2>/dev/null", 60)
    if forward.exit_code != 0:
        why = sb.exec(f"cd /testbed && git apply --recount --numstat {q} 2>&1 >/dev/null", 60).output.strip()
        return GitReading(error=why.splitlines()[-1] if why else f"git apply exited with {forward.exit_code}")
    rows, summary = _numstat(forward.output)
    reverse = sb.exec(f"cd /testbed && git apply --recount -R --numstat -z {q} 2>/dev/null", 60)
    old_rows = _numstat(reverse.output)[0][::-1]  # git -R lists the sections last first
    modes = [m for groups in _MODE_LINE.findall(summary) for m in groups if m]
    return GitReading(
        [r[2] for r in rows],
        [r[2] for r in old_rows],
        modes,
        [(r[0], r[1]) for r in rows],
        [(r[1], r[0]) for r in old_rows],
        _summary(summary),
    )


def _ours(sections: list[FilePatch]) -> GitReading:
    """What git must say of ``sections`` for it to read them as the filter does."""
    counts = [("-", "-") if p.binary else (str(p.added), str(p.removed)) for p in sections]
    return GitReading(
        paths=[p.new_path or p.old_path or "" for p in sections],
        old_paths=[p.old_path or p.new_path or "" for p in sections],
        counts=counts,
        old_counts=counts,
        summary=[line for p in sections for line in p.summary],
    )


def disagreement(text: str, reading: GitReading, sections: list[FilePatch] | None = None) -> str:
    """Why git's reading of ``text`` differs from the filter's sections of it ('' when it does not).

    ``sections``: the filter's sections of ``text`` (default: :func:`parse_diff`'s); compared in order.
    """
    sections = parse_diff(text) if sections is None else sections
    if reading.error:
        # text that neither parser finds a section in (prose, an empty diff) applies nothing: not refused
        return f"git cannot read the diff: {reading.error}" if sections else ""
    ours = _ours(sections)
    for name in ("paths", "old_paths", "counts", "old_counts", "summary"):
        if getattr(reading, name) != getattr(ours, name):
            return (
                f"git reads the diff's sections differently from the filter ({name}): git sees "
                f"{getattr(reading, name)!r}, the filter {getattr(ours, name)!r}; produce the diff with "
                "`git diff --binary`"
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


def judge(
    sb,
    workdir: str,
    full_text: str,
    filtered: FilteredDiff,
    test_files: Iterable[str],
    own: frozenset[str] = frozenset(),
) -> str:
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
    if full_text == filtered.text:
        return refusal(full, test_files, own)
    if [p.text for p in parse_diff(filtered.text)] != [p.text for p in filtered.kept]:
        # the kept sections run into each other once joined (a section that does not end its last line)
        return "the filtered diff's sections read differently once joined; produce the diff with `git diff --binary`"
    applied = read_with_git(sb, f"{workdir}/agent.diff")
    if applied.error:
        return refusal(applied, test_files, own)
    # the kept sections, read by git on their own, must be what git read in the agent's diff
    why = disagreement(filtered.text, applied, filtered.kept)
    return f"the filtered diff: {why}" if why else refusal(applied, test_files, own)


def encode_diff(text: str) -> bytes:
    """The bytes of an agent's diff; never raises (lone surrogates an agent's text may hold become '?')."""
    try:
        return text.encode("utf-8", errors="surrogateescape")
    except UnicodeEncodeError:
        return text.encode("utf-8", errors="replace")
