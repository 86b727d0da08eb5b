"""Multi-SWE-bench's Java rows: its columns become log-graded tasks on the jdk toolchain layer, run as its harness
classes run them (``mvn test`` of the whole build, or ``./gradlew test`` for its Gradle repositories) and read by
its rules (surefire's line per test class; Gradle's ``Class > method`` and task lines); its Maven rule on a real
log; and (e2e) a row over Apache Commons CLI built offline from Debian's Maven repository passes ``swebox tasks
validate``: gold resolved, empty not, a wrong fix not.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from swebox.envs.tasks.adapters import to_task
from swebox.envs.tasks.adapters_multi import MSB_JAVA
from swebox.envs.tasks.graders import lang_parsers
from swebox.envs.tasks.graders.log_parsers import parse_log

from tests.debian_tools import orig_source, row_store
from tests.envs.tasks.java_rows import CLASS, NAME, OWNER, POOL_PATH, SHA256, make_java_mirror
from tests.envs.tasks.multilang_rows import build_and_validate, grade_from_store, multi_swe_bench_row

LOG = Path(__file__).with_name("data") / "maven_commons_cli.log"
"""A real log of three traced ``mvn test -Dtest=...`` runs over Commons CLI, the bug in (test_java_multilingual)."""
F2P = [CLASS]
P2P = [f"org.apache.commons.cli.{name}" for name in ("HelpFormatterTest", "OptionTest", "CommandLineTest")]
FAKE = {"base": "b" * 40, "fix": "diff --git a/x b/x\n", "test": "t"}


def msb_java_row(c: dict[str, str], org: str = OWNER, name: str = NAME) -> dict:
    """A Multi-SWE-bench row of its Java folder over Commons CLI: UtilTest is new in the test patch (NONE, FAIL,
    PASS), three classes pass throughout; ids are test classes, as its Maven repositories' parse_log gives."""
    row = multi_swe_bench_row(c)
    row.update(
        org=org,
        repo=name,
        language="java",
        number=7,
        instance_id=f"{org}__{name}-7",
        title="stripLeadingAndTrailingQuotes throws on a lone quote",
        base={"label": f"{org}:master", "ref": "master", "sha": c["base"]},
        resolved_issues=[{"number": 6, "title": 'Util throws on "', "body": "StringIndexOutOfBoundsException"}],
        fixed_tests={t: {"run": "NONE", "test": "FAIL", "fix": "PASS"} for t in F2P},
        n2p_tests={t: {"run": "NONE", "test": "FAIL", "fix": "PASS"} for t in F2P},
        p2p_tests={t: {"run": "PASS", "test": "PASS", "fix": "PASS"} for t in P2P},
    )
    return row


def test_msb_java_rows_run_maven_or_gradle_on_the_jdk_layer():
    task = to_task(msb_java_row(FAKE))
    assert (task.language, task.grader, task.log_parser) == ("java", "log", lang_parsers.MSB_MAVEN)
    assert task.env.toolchains == ("jdk",) and task.env.commit == FAKE["base"]
    assert task.test_cmd == MSB_JAVA[lang_parsers.MSB_MAVEN][1] and " -o " in task.test_cmd
    (install,) = task.env.install
    assert install.startswith("mvn -B ") and "swebox: the env build of apache/commons-cli" in install
    assert (list(task.FAIL_TO_PASS), list(task.PASS_TO_PASS)) == (F2P, P2P)
    assert task.problem_statement.startswith('Util throws on "')
    gradle = to_task(msb_java_row(FAKE, "mockito", "mockito"))
    assert gradle.log_parser == lang_parsers.MSB_GRADLE and gradle.test_cmd.startswith("./gradlew test")
    assert gradle.env.toolchains == ("jdk",) and gradle.env.install[0].startswith("./gradlew testClasses")


def test_msb_maven_rule_reads_a_real_log():
    """Surefire's class lines of the real log: UtilTest failed in its first run and passed in its second (a
    failure is kept), HelpFormatterTest passed; the runs' totals lines are no tests."""
    got = parse_log(lang_parsers.MSB_MAVEN, LOG.read_text())
    assert got == {CLASS: "FAILED", "org.apache.commons.cli.HelpFormatterTest": "PASSED"}
    assert lang_parsers.language_of(lang_parsers.MSB_MAVEN) == "java"
    surefire3 = (
        "[INFO] Tests run: 4, Failures: 0, Errors: 0, Skipped: 4, Time elapsed: 0.01 s -- in a.Skipped\n"
        "[ERROR] Tests run: 2, Failures: 0, Errors: 1, Skipped: 0, Time elapsed: 0.2 s <<< FAILURE! -- in a.Err\n"
        "[INFO] Tests run: 0, Failures: 0, Errors: 0, Skipped: 0, Time elapsed: 0 s -- in a.Empty\n"
    )
    assert parse_log(lang_parsers.MSB_MAVEN, surefire3) == {"a.Skipped": "SKIPPED", "a.Err": "FAILED"}


def test_msb_gradle_rule_is_mockito_s():
    """Its Gradle rule on lines in Gradle's format (hand-written: no Gradle run here, see docs/datasets.md)."""
    log = (
        "> Task :compileJava UP-TO-DATE\n> Task :test FAILED\n> Task :javadoc SKIPPED\n"
        "FooTest > bar PASSED\nFooTest > baz FAILED\nFooTest > qux SKIPPED\nFooTest > bar FAILED\n"
        "FooTest > progress\n"
    )
    assert parse_log(lang_parsers.MSB_GRADLE, log) == {
        "compileJava": "PASSED",
        "test": "FAILED",
        "javadoc": "SKIPPED",
        "FooTest > bar": "FAILED",
        "FooTest > baz": "FAILED",
        "FooTest > qux": "SKIPPED",
    }


# -- e2e: swebox cache build + swebox tasks validate on the row, offline -----------------------------------------
@pytest.mark.e2e
def test_msb_java_row_validates_on_the_jdk_layer(tmp_path, monkeypatch):
    source = orig_source("commons-cli-1.6.0", POOL_PATH, SHA256)
    commits = make_java_mirror(source, tmp_path / "mirror")
    row = msb_java_row(commits)
    (tmp_path / "specs.json").write_text(json.dumps({}))
    store = str(row_store(tmp_path / "layers", ("jdk",)))
    (report,) = build_and_validate(tmp_path, [row], store).values()
    assert report["passed"] and report["gold"]["resolved"] and not report["empty"]["resolved"], report
    # a wrong fix (quotes stripped around text holding quotes) fails UtilTest, the other classes still pass
    monkeypatch.setenv("SWEBOX_GIT_MIRROR", str(tmp_path / "mirror"))
    bad = grade_from_store(store, to_task(row), commits["wrong"])
    assert bad.applied and not bad.resolved and bad.tampered == [], (bad.errors, bad.output_tail)
    assert bad.tests[CLASS].status == "failed" and all(bad.tests[t].status == "passed" for t in P2P)
