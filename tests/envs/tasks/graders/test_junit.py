"""JUnit XML parsing: every way the file can be broken gets its own status; partial results survive."""

from __future__ import annotations

from swebox.envs.tasks.graders.junit import PASSING, parse_junit

DOC = (
    b'<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" tests="5">'
    b'<testcase classname="t.test_a" name="test_ok" time="0.25" />'
    b'<testcase classname="t.test_a" name="test_bad" time="0.5"><failure message="assert 1 == 2">tb</failure>'
    b"</testcase>"
    b'<testcase classname="t.test_a" name="test_err" time="0.125"><error message="fixture boom" /></testcase>'
    b'<testcase classname="t.test_a" name="test_skip"><skipped type="pytest.skip" message="no" /></testcase>'
    b'<testcase classname="t.test_a" name="test_xf">'
    b'<skipped type="pytest.xfail" message="known" /></testcase>'
    b"</testsuite></testsuites>"
)


def test_statuses_durations_and_messages():
    report = parse_junit(DOC)
    assert report.status == "ok" and report.error == ""
    r = report.results
    assert {k[1]: v.status for k, v in r.items()} == {
        "test_ok": "passed",
        "test_bad": "failed",
        "test_err": "error",
        "test_skip": "skipped",
        "test_xf": "xfailed",
    }
    assert r[("t.test_a", "test_ok")].duration_s == 0.25
    assert r[("t.test_a", "test_bad")].message == "assert 1 == 2"
    assert {"passed", "xfailed"} == set(PASSING)


def test_missing_and_empty():
    assert parse_junit(None).status == "missing"
    assert parse_junit(b"  \n").status == "empty"


def test_truncated_keeps_the_closed_testcases():
    cut = DOC[: DOC.index(b'<testcase classname="t.test_a" name="test_err"') + 30]
    report = parse_junit(cut)
    assert report.status == "truncated"
    assert set(k[1] for k in report.results) == {"test_ok", "test_bad"}
    assert "cut off" in report.error


def test_not_xml_is_invalid():
    report = parse_junit(b"<testsuites><testcase name='a' classname='b'/></oops>\nmore\nlines\n")
    assert report.status == "invalid"
    assert report.results[("b", "a")].status == "passed"


def test_invalid_utf8_and_control_char_references_are_survived():
    doc = DOC.replace(b"assert 1 == 2", b"caf\xe9 \xff&#x1b;[31m&#0;")
    report = parse_junit(doc)
    assert report.status == "ok" and report.decode_errors
    assert report.results[("t.test_a", "test_bad")].status == "failed"
    assert report.results[("t.test_a", "test_bad")].message.startswith("caf\ufffd")


def test_duplicate_testcase_keeps_the_worst_status_and_sums_time():
    doc = (
        b'<testsuite><testcase classname="c" name="n" time="1.0" />'
        b'<testcase classname="c" name="n" time="2.0"><error message="teardown" /></testcase></testsuite>'
    )
    result = parse_junit(doc).results[("c", "n")]
    assert result.status == "error" and result.duration_s == 3.0
