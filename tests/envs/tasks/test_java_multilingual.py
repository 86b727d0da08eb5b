"""SWE-bench Multilingual's Java rows: swebench's Java specs become log-graded tasks on the jdk toolchain layer
(Maven commands traced, as eval.sh's ``set -x`` shows them to ``parse_log_maven``); a spec of one's own with
``"language": "java"``; SWE-bench's Maven rule on a real log captured from ``mvn test`` in a sandbox; and (e2e)
a row over Apache Commons CLI built offline from Debian's Maven repository passes ``swebox tasks validate``:
gold resolved, empty not, a wrong fix not.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from swebox.envs.tasks.adapters import to_task
from swebox.envs.tasks.graders import lang_parsers
from swebox.envs.tasks.graders.log_parsers import parse_log
from swebox.envs.tasks.recipes_multilingual import swebench_multilingual_recipe
from swebox.envs.tasks.schema import TaskError

from tests.debian_tools import orig_source, row_store
from tests.envs.tasks.java_rows import F2P, P2P, POOL_PATH, SHA256, java_multilingual_row, make_java_mirror
from tests.envs.tasks.multilang_rows import build_and_validate, grade_from_store

LOG = Path(__file__).with_name("data") / "maven_commons_cli.log"
"""A real log: the row's ``test_cmd`` (three traced ``mvn test -B -o -Dtest=...`` runs) with its test_patch
applied and the bug in (the empty patch), in a sandbox over the layers the e2e run below built (the jdk toolchain,
the env, the task), with the grader's environment and no network. Captured before the mirror's project got its
short-build settings (java_rows.JVM_CONFIG, stale-only compiles): hence its full test recompile in the first
two runs; the lines the rules read (the traced commands, surefire's, Maven's result) have the same form."""
FAKE = {"base": "b" * 40, "fix": "diff --git a/x b/x\n", "test": "t"}


def test_swebench_java_specs_become_traced_tasks_on_the_jdk_layer():
    recipe = swebench_multilingual_recipe("google/gson", "2158")
    assert (recipe.language, recipe.log_parser, recipe.toolchains) == ("java", "google/gson", ("jdk",))
    assert recipe.env_install == ("mvn clean install -B -pl gson -DskipTests -am",)
    assert recipe.test_cmd.startswith("( set -x ; mvnd test -B -T 1C -pl gson -Dtest=com.google.gson.functional")
    assert recipe.test_cmd.endswith(")") and dict(recipe.tool_versions) == {"java_version": "11"}
    gradle = swebench_multilingual_recipe("apache/lucene", "13494")
    assert gradle.log_parser == "apache/lucene" and gradle.env_install and "./gradlew test" in gradle.test_cmd
    with pytest.raises(TaskError, match="expected a version of google/gson"):
        swebench_multilingual_recipe("google/gson", "0.1")


def test_a_java_spec_of_ones_own(tmp_path, monkeypatch):
    row, specs = java_multilingual_row(FAKE)
    (tmp_path / "specs.json").write_text(json.dumps(specs))
    monkeypatch.setenv("SWEBOX_SWE_SPECS", str(tmp_path / "specs.json"))
    task = to_task(row)
    assert (task.language, task.grader, task.log_parser, task.env.toolchains) == ("java", "log", "maven", ("jdk",))
    assert task.test_cmd.count("mvn test -B -o -Dtest=") == 3 and task.test_cmd.startswith("( set -x ; ")
    assert task.env.commit == row["base_commit"] and list(task.FAIL_TO_PASS) == F2P
    del specs[row["repo"]]["1.6"]["log_parser"]
    (tmp_path / "specs.json").write_text(json.dumps(specs))
    with pytest.raises(TaskError, match="'maven', 'gradle', 'ant'"):
        to_task({**row, "instance_id": row["instance_id"] + "x"})


def test_maven_rule_reads_a_real_log():
    """SWE-bench's parse_log_maven, through swebox's names, on the real log: the lone-quote test fails (the
    bug), the two others pass, and nothing else is reported."""
    log = LOG.read_text()
    want = {F2P[0]: "FAILED", P2P[0]: "PASSED", P2P[1]: "PASSED"}
    assert lang_parsers.language_of("maven") == "java" == lang_parsers.language_of("google/gson")
    for name in ("maven", "parse_log_maven", "google/gson", "apache/druid"):
        assert parse_log(name, log) == want, name
    assert "StringIndexOutOfBoundsException" in log  # the bug's own failure, not a build error


def test_gradle_and_ant_rules_are_swebench_s():
    gradle = "TestFoo > testBar PASSED\nTestFoo > testBaz FAILED\n> Task :test FAILED\n"
    assert parse_log("gradle", gradle) == {"TestFoo > testBar": "PASSED", "TestFoo > testBaz": "FAILED"}
    assert parse_log("apache/lucene", gradle) == parse_log("gradle", gradle)
    ant = "    [junit] [PASS] lombok.A\n    [junit] [ERR] lombok.B\n"
    assert parse_log("projectlombok/lombok", ant) == {"lombok.A": "PASSED", "lombok.B": "FAILED"}


# -- e2e: swebox cache build + swebox tasks validate on the row, offline -----------------------------------------
@pytest.mark.e2e
def test_java_row_validates_on_the_jdk_layer(tmp_path, monkeypatch):
    source = orig_source("commons-cli-1.6.0", POOL_PATH, SHA256)
    commits = make_java_mirror(source, tmp_path / "mirror")
    row, specs = java_multilingual_row(commits)
    (tmp_path / "specs.json").write_text(json.dumps(specs))
    store = str(row_store(tmp_path / "layers", ("jdk",)))
    (report,) = build_and_validate(tmp_path, [row], store).values()
    assert report["passed"] and report["gold"]["resolved"] and not report["empty"]["resolved"], report
    # a wrong fix (quotes stripped around text holding quotes) does not resolve, on the same layers
    monkeypatch.setenv("SWEBOX_SWE_SPECS", str(tmp_path / "specs.json"))
    monkeypatch.setenv("SWEBOX_GIT_MIRROR", str(tmp_path / "mirror"))
    bad = grade_from_store(store, to_task(row), commits["wrong"])
    assert bad.applied and not bad.resolved and bad.tampered == [], (bad.errors, bad.output_tail)
    assert bad.tests[P2P[0]].status == "passed" and bad.tests[F2P[0]].status == "failed"
