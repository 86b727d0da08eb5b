"""What the model sees after each action: command output with its exit code, cleaned (invalid UTF-8
replaced, NUL removed) and cut to a length limit that keeps the head and the tail, plus a reminder when few
turns remain. Pure functions of their arguments; every rendered observation fits ``max_chars``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Protocol

REPLACEMENT = "\ufffd"
_SURROGATES = re.compile("[\ud800-\udfff]")


@dataclass(frozen=True)
class ObservationConfig:
    """How observations are rendered."""

    max_chars: int = 10_000
    """Upper bound on the length of every observation; longer command output loses its middle."""
    warn_turns_left: int = 3
    """Append a reminder to submit when this many turns or fewer remain (0 turns the reminder off)."""

    def __post_init__(self) -> None:
        if self.max_chars < 500:
            raise ValueError(
                f"ObservationConfig.max_chars: expected at least 500 characters (room for the output "
                f"markers and some output); found {self.max_chars}. Use e.g. 10000."
            )
        if self.warn_turns_left < 0:
            raise ValueError(
                f"ObservationConfig.warn_turns_left: expected 0 (no reminder) or more; found "
                f"{self.warn_turns_left}. Use e.g. 3."
            )


class ExecResultLike(Protocol):
    """The fields of ``swebox.envs.sandbox.ExecResult`` that an observation shows."""

    output: str
    exit_code: int | None
    timed_out: bool
    truncated: bool


def clean_text(data: str | bytes) -> str:
    """Text safe to show and to tokenise: invalid UTF-8 (bytes, or lone surrogates left by a lenient
    decoder) becomes U+FFFD, and NUL characters are removed (tokenisers and many APIs stop at them)."""
    if isinstance(data, bytes):
        text = data.decode("utf-8", errors="replace")
    else:
        text = _SURROGATES.sub(REPLACEMENT, data)
    return text.replace("\x00", "")


def cut_marker(cut: int) -> str:
    """The line that stands in for the removed middle of a long output."""
    return f"\n[... {cut} characters cut from the middle of the output ...]\n"


def truncate_middle(text: str, limit: int) -> str:
    """``text`` itself if it fits ``limit`` characters, else its head and tail around a marker saying how
    many characters were cut; the result is never longer than ``limit``."""
    if len(text) <= limit:
        return text
    # The marker's length depends on the number it shows; size it for the largest possible cut, so the
    # result fits the limit whatever the final count is.
    keep = max(0, limit - len(cut_marker(len(text))))
    if keep == 0:
        return text[:limit]
    head = keep - keep // 2
    tail = keep - head
    cut = len(text) - head - tail
    return text[:head] + cut_marker(cut) + (text[len(text) - tail :] if tail else "")


def turns_left_reminder(turns_left: int, config: ObservationConfig) -> str:
    """A reminder to finish, appended when ``turns_left`` is at or below the warning threshold."""
    if turns_left > config.warn_turns_left or config.warn_turns_left == 0:
        return ""
    if turns_left <= 0:
        return "\n\n[This was your last turn.]"
    turns = "turn" if turns_left == 1 else "turns"
    return f"\n\n[{turns_left} {turns} left. Submit your changes before you run out of turns.]"


def fit(body: str, config: ObservationConfig, turns_left: int | None = None) -> str:
    """Any tool's observation text, cleaned, with the turns reminder, cut to ``config.max_chars``."""
    reminder = "" if turns_left is None else turns_left_reminder(turns_left, config)
    return truncate_middle(clean_text(body), config.max_chars - len(reminder)) + reminder


def render_exec(result: ExecResultLike, config: ObservationConfig, turns_left: int | None = None) -> str:
    """The observation of a bash command: exit code (or the timeout) and output, within ``max_chars``."""
    if result.timed_out:
        head = (
            "The command timed out and was killed; the episode continues. Avoid commands that wait for "
            "input or run for long (run them in the background or with a smaller input).\n"
        )
    else:
        head = f"<returncode>{result.exit_code}</returncode>\n"
    note = (
        "\n[The output passed the sandbox's byte limit: only its head and tail were kept.]" if result.truncated else ""
    )
    reminder = "" if turns_left is None else turns_left_reminder(turns_left, config)
    frame_open, frame_close = "<output>\n", "\n</output>"
    budget = config.max_chars - len(head) - len(frame_open) - len(frame_close) - len(note) - len(reminder)
    # One trailing newline per output is noise next to the closing tag.
    output = truncate_middle(clean_text(result.output).removesuffix("\n"), budget)
    return head + frame_open + output + frame_close + note + reminder
