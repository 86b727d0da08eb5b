"""The grade monitor's judgement of an event stream and the host's check of its signature (no sandbox)."""

from __future__ import annotations

import hashlib
import hmac
import json

import pytest
from swebox.envs.tasks.graders.grade_monitor import Judge, status_of
from swebox.envs.tasks.graders.verdict import plant_canaries, read_verdict

PASS, FAIL = "c/test_c.py::test_good", "c/test_c.py::test_bad"


def _events(ids, outcomes, *, finish=True, exit=1):
    out = [{"e": "start"}, {"e": "collected", "ids": ids}]
    for test_id in ids:
        call = outcomes.get(test_id, "passed")
        out += [
            {"e": "report", "id": test_id, "when": "setup", "outcome": "passed"},
            {"e": "report", "id": test_id, "when": "call", "outcome": call, "msg": "boom" if call != "passed" else ""},
            {"e": "report", "id": test_id, "when": "teardown", "outcome": "passed"},
        ]
    out.append({"e": "check", "problems": [], "objects": {"m.f": 1}})
    if finish:
        out.append({"e": "finish", "exit": exit, "missing_files": []})
    return out


BASELINE = {"e": "baseline", "objects": {"m.f": 1}}
"""The runner's start-up snapshot of pytest's objects (name -> id), sent before any project code runs."""
PINNED = {"e": "pinned", "why": ""}
"""The runner's first event: its report channel is pinned to its fd (runner_pin.py)."""


def _judge(events, canaries=None, exit_status=0, baseline=True, pinned=True):
    judge = Judge(canaries if canaries is not None else {PASS: "passed", FAIL: "failed"})
    for event in [PINNED] * pinned + [BASELINE] * baseline + events:
        judge.feed(json.dumps(event).encode() if isinstance(event, dict) else event)
    return judge.verdict(exit_status, False)


def test_a_complete_consistent_stream_is_clean():
    verdict = _judge(_events(["t.py::a", PASS, FAIL], {FAIL: "failed"}))
    assert verdict["problems"] == [] and verdict["tampered"] == []
    assert verdict["results"]["t.py::a"][0] == "passed" and verdict["results"][FAIL] == ["failed", 0.0, "boom"]


@pytest.mark.parametrize(
    "when, outcome, xfail, status",
    [
        ("call", "passed", False, "passed"),
        ("call", "passed", True, "xpassed"),
        ("call", "skipped", True, "xfailed"),
        ("call", "skipped", False, "skipped"),
        ("call", "failed", False, "failed"),
        ("setup", "failed", False, "error"),
        ("setup", "skipped", False, "skipped"),
        ("teardown", "failed", False, "error"),
    ],
)
def test_statuses_keep_xfail_xpass_and_skip_apart(when, outcome, xfail, status):
    assert status_of(when, outcome, xfail) == status


def test_canaries_that_come_out_wrong_are_tampering():
    verdict = _judge(_events(["t.py::a", PASS, FAIL], {}))  # the one planted to fail passed
    assert verdict["tampered"] == [f"canary test {FAIL} was reported passed, planted to be failed"]
    missing = _judge(_events(["t.py::a"], {}))
    assert len(missing["tampered"]) == 2 and all("reported missing" in t for t in missing["tampered"])


@pytest.mark.parametrize(
    "mutate, expected",
    [
        (lambda ev: ev[:5] + [ev[3]] + ev[5:], "call report after"),  # a second call report for the test
        (lambda ev: ev + [{"e": "report", "id": "t.py::z", "when": "setup", "outcome": "passed"}], "after the finish"),
        (
            lambda ev: ev[:2] + [{"e": "report", "id": "t.py::z", "when": "setup", "outcome": "passed"}] + ev[2:],
            "not collected",
        ),
        (lambda ev: ev[:1] + [b"{not json"] + ev[1:], "unreadable event"),
        (lambda ev: ev[:2] + ev[:2] + ev[2:], "second"),
    ],
    ids=["duplicate", "after-finish", "uncollected", "garbage", "restart"],
)
def test_an_inconsistent_stream_is_tampering(mutate, expected):
    events = _events(["t.py::a", PASS, FAIL], {FAIL: "failed"})
    verdict = _judge(mutate(events))
    assert any(expected in t for t in verdict["tampered"]), verdict


def test_anything_short_of_a_finished_run_is_a_problem():
    events = _events(["t.py::a", PASS, FAIL], {FAIL: "failed"})
    assert "ended without finishing" in _judge(events[:-1])["problems"][0]
    assert _judge(_events(["t.py::a", PASS, FAIL], {FAIL: "failed"}, exit=2))["problems"] == [
        "pytest did not complete a run: exit 2"
    ]
    cut = [e for e in events if not (e.get("id") == "t.py::a" and e.get("when") == "teardown")]
    assert _judge(cut)["problems"] == ["t.py::a: incomplete reports (['setup', 'call'])"]
    assert "exited with status 1" in _judge(events, exit_status=1)["problems"][0]


def _signed(key: bytes, payload: dict) -> bytes:
    data = json.dumps(payload).encode()
    return f"SWEBOX-VERDICT {hmac.new(key, data, hashlib.sha256).hexdigest()}\n".encode() + data


def test_only_a_verdict_signed_with_the_runs_key_is_believed():
    key, payload = (
        b"k" * 32,
        {"results": {"t.py::a": ["passed", 0.1, ""]}, "problems": [], "tampered": [], "timed_out": False},
    )
    good = read_verdict(_signed(key, payload), key)
    assert good.status == "ok" and good.results == {"t.py::a": ("passed", 0.1, "")}
    assert read_verdict(_signed(b"x" * 32, payload), key).status == "forged"
    assert read_verdict(_signed(key, payload) + b" ", key).status == "forged"  # a byte added after signing
    assert read_verdict(b"garbage", key).status == "forged"
    assert read_verdict(None, key).status == "missing"


def test_canaries_have_unguessable_names_and_one_of_each_outcome():
    a, b = plant_canaries(), plant_canaries()
    assert sorted(a.expected.values()) == ["failed", "passed"] and a.file != b.file
    assert all(node.startswith(a.file + "::test_") for node in a.expected)
    assert "canary" not in a.text and "swebox" not in a.file
    namespace: dict = {}
    exec(compile(a.text, a.file, "exec"), namespace)
    for node, expected in a.expected.items():
        test = namespace[node.rpartition("::")[2]]
        if expected == "passed":
            test()
        else:
            with pytest.raises(AssertionError):
                test()


@pytest.mark.parametrize(
    "path, trusted",
    [
        ("/venv/lib/python3.11/site-packages/_pytest/runner.py", True),
        ("/testbed/tests/plugins/fixtures.py", True),  # a pytest_plugins module of the project's tests
        # a conftest file by its place; its hooks must also be the file's own code, and the file older than
        # the run (runner_origins.Origins: a conftest.py written at run time, or code compiled under its name, is not)
        ("/testbed/conftest.py", True),
        ("/testbed/calc/__init__.py", False),  # the code under test
        ("/testbed/venv/lib/python3.11/site-packages/x.py", False),
    ],
)
def test_plugin_origins_the_watchdog_trusts(path, trusted):
    from swebox.envs.tasks.graders.pytest_runner import _trusted_file

    assert _trusted_file(path) is trusted


# -- issue 31: the monitor holds the start-up snapshot and the rewritten-test table ---------------------------
def test_a_replaced_object_is_seen_against_the_snapshot_the_monitor_holds():
    events = _events(["t.py::a", PASS, FAIL], {FAIL: "failed"})
    events[-2] = {"e": "check", "problems": [], "objects": {"m.f": 2}}  # refreshing the runner's copy changes nothing
    assert _judge(events)["tampered"] == ["replaced: m.f"]


def test_a_run_without_the_snapshot_or_its_check_is_tampered():
    no_baseline = _judge(_events(["t.py::a", PASS, FAIL], {FAIL: "failed"}), baseline=False)
    assert "a check of pytest's objects without a start-up snapshot" in no_baseline["tampered"]
    no_check = [e for e in _events(["t.py::a", PASS, FAIL], {FAIL: "failed"}) if e["e"] != "check"]
    assert "no check of pytest's objects against the start-up snapshot" in _judge(no_check)["tampered"]
    second = _events(["t.py::a", PASS, FAIL], {FAIL: "failed"})
    second.insert(1, {"e": "baseline", "objects": {}})
    assert "second baseline event" in _judge(second)["tampered"]


def test_each_task_test_file_must_be_loaded_from_its_cached_rewrite():
    table = {"/testbed/t.py": "/cache/e1"}

    def judge(loads):
        events = _events(["t.py::a", PASS, FAIL], {FAIL: "failed"})
        events[0] = {"e": "start", "rewrite": True}
        events[2:2] = [{"e": "rewrite", "file": f, "entry": e} for f, e in loads]
        judge = Judge({PASS: "passed", FAIL: "failed"}, table)
        for event in [PINNED, BASELINE, *events]:
            judge.feed(json.dumps(event).encode())
        return judge.verdict(0, False)["tampered"]

    assert judge([("/testbed/t.py", "/cache/e1"), ("/testbed/conftest.py", "")]) == []
    assert judge([("/testbed/t.py", "/tmp/forged.pyc")]) == [
        "test file /testbed/t.py was loaded from /tmp/forged.pyc, not from its cached rewrite",
        "test file /testbed/t.py was not loaded from its cached rewrite",
    ]
    assert judge([]) == ["test file /testbed/t.py was not loaded from its cached rewrite"]


def test_a_run_whose_channel_was_not_pinned_is_refused():
    events = _events(["t.py::a", PASS, FAIL], {FAIL: "failed"})
    assert "the runner never said its report channel was pinned" in _judge(events, pinned=False)["tampered"]
    unpinned = _judge([{"e": "pinned", "why": "seccomp: EPERM"}, BASELINE, *events], pinned=False, baseline=False)
    assert unpinned["problems"] == ["the report channel could not be pinned to its fd: seccomp: EPERM"]
    assert "second or late pinned event" in _judge([PINNED, *events])["tampered"]
