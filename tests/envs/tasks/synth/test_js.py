"""JavaScript pieces without the network: package specs, mutable paths, site application, TAP failure details,
parser names, the schema's languages and SWE-bench Multilingual rows of swebench's own JS repositories."""

from __future__ import annotations

import json
import shutil

import pytest
from swebox.envs.tasks.adapters import to_task
from swebox.envs.tasks.graders import log_canaries, log_parsers, node_canaries
from swebox.envs.tasks.schema import Task, TaskError
from swebox.envs.tasks.synth import npm
from swebox.envs.tasks.synth.js_mutations import JsMutation, is_mutable_js
from swebox.envs.tasks.synth.log_runner import failure_details


def test_parse_spec_needs_an_exact_version():
    assert npm.parse_spec("npm:minimist@1.2.8") == ("minimist", "1.2.8")
    assert npm.parse_spec("npm:@scope/pkg@2.0.0-rc.1") == ("@scope/pkg", "2.0.0-rc.1")
    for bad in ("minimist@1.2.8", "npm:minimist", "npm:minimist@^1.2.0", "npm:minimist@latest"):
        with pytest.raises(npm.NpmError, match="npm:NAME@VERSION"):
            npm.parse_spec(bad)


def test_test_file_of_a_tap_id():
    assert npm.test_file("- /testbed/test/bool.js") == "test/bool.js"
    assert npm.test_file("should be equal") is None


@pytest.mark.parametrize(
    ("path", "mutable"),
    [
        ("index.js", True),
        ("lib/parse.mjs", True),
        ("src/a.cjs", True),
        ("test/a.js", False),
        ("lib/a.test.js", False),
        ("dist/a.js", False),
        ("a.min.js", False),
        ("node_modules/x/i.js", False),
        ("example/parse.js", False),
        (".eslintrc.js", False),
        ("jest.config.js", False),
        ("README.md", False),
    ],
)
def test_is_mutable_js(path, mutable):
    assert is_mutable_js(path) is mutable


@pytest.mark.skipif(shutil.which("node") is None, reason="node --check validates candidates")
def test_sites_apply_at_utf16_offsets_and_unparsable_candidates_are_dropped():
    source = "function f(a) {\n  const s = '😀';\n  return a < 1;\n}\n"
    at = source.encode("utf-16-le").decode("utf-16-le").index("<")
    offset = len(source[:at].encode("utf-16-le")) // 2  # what acorn reports: the emoji is two code units
    site = JsMutation("change_comparison_operator", "i.js", source, offset, offset + 1, "<=", "f", 3, 3)
    candidate = site.candidate()
    assert candidate is not None and "return a <= 1;" in candidate.source and "'😀'" in candidate.source
    broken = JsMutation("remove_assignment", "i.js", source, offset, offset + 1, "(", "f", 3, 3)
    assert broken.candidate() is None  # does not parse
    assert JsMutation("x", "i.js", source, offset, offset + 1, "<", "f", 3, 3).candidate() is None  # no change


def test_failure_details_read_the_tap_block_under_a_failure():
    log = (
        "ok 1 - /testbed/test/a.js\n  ---\n  duration_ms: 1\n  ...\nnot ok 2 - /testbed/test/b.js\n  ---\n"
        "  error: 'test failed'\n  exitCode: 1\n  ...\nok 3 - /testbed/test/c.js\n"
    )
    details = failure_details(log, {"- /testbed/test/b.js"})
    assert details == {
        "- /testbed/test/b.js": ("error: 'test failed'", "---\n  error: 'test failed'\n  exitCode: 1\n  ...")
    }


def test_javascript_parser_names():
    names = log_parsers.parser_names()
    assert {"tap", "jest", "jest-json", "vitest", "karma", "axios/axios", "vuejs/core"} <= set(names)
    assert "immutable-js/immutable-js" not in names
    assert "picks a log format by the instance id" in log_parsers.check_parser_name("immutable-js/immutable-js")
    assert log_parsers.parse_log("jest", "  ✓ adds numbers (3 ms)\n  ✕ subtracts (1 ms)\n") == {
        "adds numbers": "PASSED",
        "subtracts": "FAILED",
    }
    assert log_parsers.parser_key("tap", "- /testbed/test/a.js") == "- /testbed/test/a.js"


def test_schema_languages():
    base = {"instance_id": "x-1", "FAIL_TO_PASS": ["- /testbed/test/a.js"], "test_cmd": "node --test test"}
    assert Task(**base, grader="log", log_parser="tap", language="javascript").language == "javascript"
    with pytest.raises(TaskError, match=r"Task.grader: expected 'log' \(or 'harbor'\) for a javascript task"):
        Task(**{**base, "test_cmd": "/venv/bin/python -m pytest"}, language="javascript")
    with pytest.raises(TaskError, match="Task.language: expected one of"):
        Task(**base, grader="log", log_parser="tap", language="cobol")


def test_multilingual_row_of_a_swebench_javascript_repository():
    """axios/axios 5892 in SWE-bench Multilingual's keys: swebench's spec gives the command and the parser."""
    row = {
        "repo": "axios/axios",
        "instance_id": "axios__axios-5892",
        "base_commit": "a" * 40,
        "patch": "diff --git a/lib/x.js b/lib/x.js\n",
        "test_patch": "",
        "problem_statement": "p",
        "hints_text": "",
        "created_at": "2023-09-01T00:00:00Z",
        "version": "5892",
        "environment_setup_commit": "a" * 40,
        "FAIL_TO_PASS": json.dumps(["compression"]),
        "PASS_TO_PASS": "[]",
    }
    task = to_task(row)
    assert (task.language, task.grader, task.log_parser) == ("javascript", "log", "axios/axios")
    assert task.test_cmd == "npx mocha test/unit/adapters/http.js -R tap -g 'compression'"
    assert task.env is not None and task.env.install == ("npm install",) and task.env.test_deps == ()
    assert task.metadata["node_version"] == "20"


def test_node_canaries_go_into_the_folders_node_test_runs():
    assert node_canaries.folders("node --test --test-reporter=tap test lib/") == ["test", "lib"]
    assert node_canaries.folders("node --test test/a.js") == []
    assert node_canaries.folders("npx mocha -R tap test/unit -g 'x'") == []
    assert node_canaries.folders("node --test test ; rm -rf x") == []
    planted = log_canaries.LogCanaries("test", {"bakimo_tulane": "PASSED", "roseku_dafi": "FAILED"})
    honest = {"- /testbed/test/bakimo_tulane.js": "PASSED", "- /testbed/test/roseku_dafi.js": "FAILED"}
    assert log_canaries.problems(planted, honest) == []
    forged = {**honest, "- /testbed/test/roseku_dafi.js": "PASSED"}
    assert log_canaries.problems(planted, forged) == [
        "canary test test::roseku_dafi was reported PASSED, planted to be FAILED"
    ]
