"""Multi-SWE-bench's and SWE-rebench-V2's Java rows. Multi-SWE-bench: its columns become log-graded tasks on the
jdk toolchain layer, run as its harness classes run them (``mvn test`` of the whole build, or ``./gradlew test``
for its Gradle repositories) and read by its rules (surefire's line per test class; Gradle's ``Class > method``
and task lines); its Maven rule on a real log; an env needing Maven Central fails clearly; and (e2e) a row over
Apache Commons CLI built offline from Debian's Maven repository passes ``swebox tasks validate``:
gold resolved, empty not, a wrong fix not. SWE-rebench-V2: a row naming ``parse_java_mvn`` (its Java
rule) runs its own command on the jdk layer, read by that rule, on the same real log and (e2e) the same project.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from swebox.envs.cache import LayerStore
from swebox.envs.tasks.adapters import to_task
from swebox.envs.tasks.adapters_multi import MSB_JAVA
from swebox.envs.tasks.graders import lang_parsers
from swebox.envs.tasks.graders.log_parsers import parse_log
from swebox.envs.tasks.schema import TaskError

from tests.debian_tools import orig_source, row_store
from tests.envs.tasks.java_rows import (
    BUG,
    CLASS,
    FILE,
    FIX,
    NAME,
    OWNER,
    POM,
    POOL_PATH,
    SHA256,
    TEST_FILE,
    make_java_mirror,
    offline_project,
)
from tests.envs.tasks.multilang_rows import (
    _mirror,
    build_and_validate,
    grade_from_store,
    multi_swe_bench_row,
    swe_rebench_v2_row,
)

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


GUAVA = (
    "<dependency><groupId>com.google.guava</groupId><artifactId>guava</artifactId><version>33.0.0-jre</version>"
    "</dependency>"
)
"""A real library at a version Debian does not package (bookworm's is 31.1-jre): only Maven Central has it."""


@pytest.mark.e2e
def test_msb_java_env_that_needs_maven_central_fails_clearly(tmp_path):
    """The env build of a row whose pom needs an artifact outside Debian's maven-repo fails, Maven's error naming
    the artifact and swebox's line saying why, and no env layer is published."""
    source = orig_source("commons-cli-1.6.0", POOL_PATH, SHA256)

    def prepare(work: Path) -> None:
        offline_project(work, POM.replace("<dependencies>", "<dependencies>" + GUAVA))

    tests = (source / TEST_FILE).read_text()
    c = _mirror(source, tmp_path / "mirror", f"{OWNER}__{NAME}", FILE, FIX, BUG, TEST_FILE, tests, prepare)
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps(msb_java_row(c)) + "\n")
    store = row_store(tmp_path / "layers", ("jdk",))
    before = {m.key for m in LayerStore(store).ls()}
    env = {**os.environ, "SWEBOX_GIT_MIRROR": str(tmp_path / "mirror")}
    argv = [sys.executable, "-m", "swebox.scripts.cli", "cache", "--store", str(store), "build", "--tasks", str(rows)]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=1800)
    out = done.stdout + done.stderr
    assert done.returncode != 0, out[-3000:]
    assert "guava" in out and "swebox: the env build of apache/commons-cli" in out, out[-3000:]
    assert "Maven Central" in out and {m.key for m in LayerStore(store).ls()} == before


# -- SWE-rebench-V2 ----------------------------------------------------------------------------------------------
def rebench_java_row(c: dict[str, str], parser: str = "parse_java_mvn") -> dict:
    """A SWE-rebench-V2 row of its Java rows' form: its install config names Maven commands and its parser."""
    row = swe_rebench_v2_row(c)
    row.update(
        instance_id=f"{OWNER}__{NAME}-rebench-7",
        repo=f"{OWNER}/{NAME}",
        language="java",
        version="1.6",
        problem_statement='Util.stripLeadingAndTrailingQuotes throws on a lone " .',
        FAIL_TO_PASS=F2P,
        PASS_TO_PASS=P2P,
        image_name="swerebench/commons-cli:1",
        install_config={
            "base_image_name": "maven:3.9-eclipse-temurin-17",
            "install": ["mvn -B test -Dmaven.test.failure.ignore=true"],
            "log_parser": parser,
            "test_cmd": "mvn -B -o test -Dsurefire.useFile=false",
        },
    )
    return row


def test_rebench_java_rows_use_their_install_config_on_the_jdk_layer():
    task = to_task(rebench_java_row(FAKE))
    assert (task.language, task.grader, task.log_parser, task.env.toolchains) == (
        "java",
        "log",
        "parse_java_mvn",
        ("jdk",),
    )
    assert task.test_cmd == "mvn -B -o test -Dsurefire.useFile=false"
    assert task.env.install == ("mvn -B test -Dmaven.test.failure.ignore=true",)
    assert to_task({**rebench_java_row(FAKE, "parse_log_maven"), "instance_id": "x-1"}).log_parser == "parse_log_maven"
    with pytest.raises(TaskError, match="parse_log_gradlew_v1"):
        to_task({**rebench_java_row(FAKE, "parse_log_gradlew_v1"), "instance_id": "x-2"})


def test_rebench_java_mvn_rule_reads_a_real_log():
    """SWE-rebench-V2's parse_java_mvn on the real log: surefire's class lines (a failure kept), the failing
    method of surefire's Results section, and SWE-bench's -Dtest= rule as a fallback for the three runs."""
    got = parse_log("parse_java_mvn", LOG.read_text())
    assert got == {
        CLASS: "FAILED",
        "UtilTest.testStripLeadingAndTrailingQuotes": "FAILED",
        "UtilTest": "FAILED",
        "org.apache.commons.cli.HelpFormatterTest": "PASSED",
        f"{CLASS}#testStripLeadingAndTrailingQuotes": "FAILED",
        f"{CLASS}#testStripLeadingHyphens": "PASSED",
        "org.apache.commons.cli.HelpFormatterTest#testFindWrapPos": "PASSED",
    }
    xml = '<testcase classname="a.B" name="ok"/><testcase classname="a.B" name="bad"><failure/></testcase>'
    assert parse_log("parse_log_java_mvn", xml) == {"a.B ok": "PASSED", "a.B bad": "FAILED"}
    assert parse_log("parse_java_mvn", "[INFO] Running a.Only\n") == {"a.Only": "PASSED"}


# -- e2e: swebox cache build + swebox tasks validate on the rows, offline ------------------------------------------
@pytest.mark.e2e
def test_msb_and_rebench_java_rows_validate_on_the_jdk_layer(tmp_path, monkeypatch):
    """A Multi-SWE-bench row and a SWE-rebench-V2 row over the same commits, in one file: one build and one
    validate run, each row still built on its own recipe, graded gold and empty, and reported."""
    source = orig_source("commons-cli-1.6.0", POOL_PATH, SHA256)
    commits = make_java_mirror(source, tmp_path / "mirror")
    rows = [msb_java_row(commits), rebench_java_row(commits)]
    (tmp_path / "specs.json").write_text(json.dumps({}))
    store = str(row_store(tmp_path / "layers", ("jdk",)))
    report = build_and_validate(tmp_path, rows, store)
    assert sorted(report) == sorted(row["instance_id"] for row in rows), sorted(report)
    for r in report.values():
        assert r["passed"] and r["gold"]["resolved"] and not r["empty"]["resolved"], r
    # a wrong fix (quotes stripped around text holding quotes) fails UtilTest, the other classes still pass
    monkeypatch.setenv("SWEBOX_GIT_MIRROR", str(tmp_path / "mirror"))
    for row in rows:
        bad = grade_from_store(store, to_task(row), commits["wrong"])
        assert bad.applied and not bad.resolved and bad.tampered == [], (row["instance_id"], bad.errors)
        assert bad.tests[CLASS].status == "failed" and all(bad.tests[t].status == "passed" for t in P2P)
