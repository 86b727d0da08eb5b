"""Observation rendering, exact strings: cleaning, head+tail truncation, exit codes, timeouts, reminders."""

from __future__ import annotations

import pytest
from swebox.envs.agent.observations import (
    ObservationConfig,
    clean_text,
    cut_marker,
    fit,
    render_exec,
    truncate_middle,
    turns_left_reminder,
)

from tests.envs.agent.fakes import exec_result

SMALL = ObservationConfig(max_chars=500, warn_turns_left=2)


def test_config_checks_explain_the_fix():
    with pytest.raises(ValueError, match="expected at least 500 characters .* found 100"):
        ObservationConfig(max_chars=100)
    with pytest.raises(ValueError, match="warn_turns_left: expected 0 .* found -1"):
        ObservationConfig(warn_turns_left=-1)


def test_clean_text_replaces_invalid_utf8_and_drops_nul():
    assert clean_text(b"ok \xff\xfe end\x00!") == "ok \ufffd\ufffd end!"
    assert clean_text("caf\udce9 \x00x") == "caf\ufffd x"  # surrogateescape leftovers from a lenient decoder
    assert clean_text("é😀\t\r\n") == "é😀\t\r\n"


def test_truncate_middle_keeps_head_and_tail_with_the_cut_count():
    assert truncate_middle("short", 10) == "short"
    text = "".join(chr(ord("a") + i % 26) for i in range(1000))
    marker_len = len(cut_marker(1000))  # "\n[... 1000 characters cut from the middle of the output ...]\n"
    assert marker_len == 61  # 1 + len("[... ") 5 + len("1000") 4 + 46 + len("...]") 4 + 1
    out = truncate_middle(text, 100)
    # 100 - 61 = 39 characters kept: 20 from the head, 19 from the tail; 961 cut.
    assert out == text[:20] + "\n[... 961 characters cut from the middle of the output ...]\n" + text[-19:]
    assert len(out) == 99  # the marker shows 961 (3 digits) where room was kept for 1000 (4)


def test_truncate_middle_never_exceeds_the_limit():
    for size in (61, 62, 63, 100, 999, 10_000, 123_457):
        for limit in (1, 50, 62, 63, 64, 200, 5000):
            assert len(truncate_middle("x" * size, limit)) <= limit


def test_turns_left_reminder_only_near_the_limit():
    config = ObservationConfig(warn_turns_left=3)
    assert turns_left_reminder(4, config) == ""
    assert turns_left_reminder(3, config) == "\n\n[3 turns left. Submit your changes before you run out of turns.]"
    assert turns_left_reminder(1, config) == "\n\n[1 turn left. Submit your changes before you run out of turns.]"
    assert turns_left_reminder(0, config) == "\n\n[This was your last turn.]"
    assert turns_left_reminder(1, ObservationConfig(warn_turns_left=0)) == ""


def test_render_exec_exact_output_with_exit_code():
    assert render_exec(exec_result("a\nb\n", 0), SMALL) == "<returncode>0</returncode>\n<output>\na\nb\n</output>"
    assert render_exec(exec_result("", 2), SMALL) == "<returncode>2</returncode>\n<output>\n\n</output>"


def test_render_exec_timeout_says_so_and_the_episode_continues():
    out = render_exec(exec_result("partial\n", None, timed_out=True), SMALL, turns_left=5)
    assert out == (
        "The command timed out and was killed; the episode continues. Avoid commands that wait for input or "
        "run for long (run them in the background or with a smaller input).\n<output>\npartial\n</output>"
    )


def test_render_exec_notes_sandbox_capped_output_and_adds_the_reminder():
    out = render_exec(exec_result("x", 0, truncated=True), SMALL, turns_left=1)
    assert out == (
        "<returncode>0</returncode>\n<output>\nx\n</output>\n"
        "[The output passed the sandbox's byte limit: only its head and tail were kept.]\n\n"
        "[1 turn left. Submit your changes before you run out of turns.]"
    )


def test_render_exec_long_output_fits_max_chars_exactly_accounted():
    output = "H" * 3000 + "T" * 3000
    out = render_exec(exec_result(output, 1), SMALL, turns_left=2)
    assert len(out) <= 500
    head = "<returncode>1</returncode>\n<output>\n"
    tail = "\n</output>\n\n[2 turns left. Submit your changes before you run out of turns.]"
    assert out.startswith(head + "HHHH") and out.endswith("TTTT" + tail)
    budget = 500 - len(head) - len(tail)  # 500 - 36 - 76 = 388 for the output with its marker
    assert (len(head), len(tail), budget) == (36, 76, 388)
    kept = budget - len(cut_marker(6000))  # 388 - 61 = 327: 164 head + 163 tail, 5673 cut
    assert out == head + "H" * 164 + cut_marker(5673) + "T" * 163 + tail
    assert kept == 327


def test_fit_cleans_and_caps_any_text():
    assert fit("a\x00b\udcff", SMALL) == "ab\ufffd"
    assert len(fit("é" * 10_000, SMALL, turns_left=0)) <= 500
