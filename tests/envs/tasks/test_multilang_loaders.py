"""Loaders of Multi-SWE-bench, SWE-rebench-V2, SWE-smith's and SWE-bench Multilingual's Go and Rust rows: each
format becomes a log-graded task with the same start rule as the Python datasets; and (e2e) rows of each format,
built locally from Debian's go-cmp and hex, pass ``swebox tasks validate`` on the Go or Rust toolchain layer:
gold resolved, empty not; a wrong fix not. The same for C++ as SWE-rebench-V2 rows (GoogleTest's samples and
doctest's examples, on the cc toolchain layer).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from swebox.envs.tasks.adapters import detect, to_task
from swebox.envs.tasks.graders import lang_parsers
from swebox.envs.tasks.schema import TaskError

from tests.debian_tools import row_store
from tests.envs.tasks.multilang_rows import (
    DT_F2P,
    F2P,
    GT_F2P,
    P2P,
    build_and_validate,
    doctest_rebench_row,
    grade_from_store,
    gtest_rebench_row,
    make_doctest_mirror,
    make_gtest_mirror,
    make_mirror,
    make_rust_mirror,
    multi_swe_bench_row,
    rust_rows,
    swe_bench_multilingual_row,
    swe_rebench_v2_row,
    swe_smith_row,
)

COMMITS = {
    "clean": "a" * 40,
    "base": "b" * 40,
    "fix": "diff --git a/x.go b/x.go\n",
    "bug": "",
    "test": "t",
    "wrong": "",
}


def fake_commits() -> dict[str, str]:
    from tests.envs.tasks.graders.test_lang_logs import GO_BUG, GO_FIX, line_patch

    text = f"package cmpopts\n\nimport \"math\"\n\nfunc f(x, y float64) bool {{\n{GO_FIX}}}\n"
    bug = line_patch("cmp/cmpopts/equate.go", text, GO_FIX, GO_BUG)
    return {**COMMITS, "bug": bug}


def test_multi_swe_bench_row_becomes_a_go_log_task():
    row = multi_swe_bench_row(fake_commits())
    assert detect(row) == "multi-swe-bench"
    task = to_task(row)
    assert (task.instance_id, task.repo, task.base_commit) == ("google__go-cmp-1", "google/go-cmp", "b" * 40)
    assert list(task.FAIL_TO_PASS) == F2P and list(task.PASS_TO_PASS) == P2P
    assert (task.language, task.grader, task.log_parser) == ("go", "log", lang_parsers.MSB_GO)
    assert task.test_cmd == "go test -v -count=1 ./..."
    assert task.env.toolchains == ("go",) and task.env.source == "git+https://github.com/google/go-cmp.git"
    assert task.env.commit == "b" * 40 and task.task_layer_key and task.bug_patch == ""
    assert "EquateApprox(0, 0.1)" in task.problem_statement and "fix_patch" not in task.metadata


def test_multi_swe_bench_transitions_follow_the_statuses_not_the_map_names():
    row = multi_swe_bench_row(fake_commits())
    row["s2p_tests"] = {
        "TestStillFailing": {"run": "FAIL", "test": "FAIL", "fix": "FAIL"},
        "TestNowPasses": {"run": "FAIL", "test": "FAIL", "fix": "PASS"},
    }
    task = to_task(row)
    assert "TestNowPasses" in task.FAIL_TO_PASS and "TestStillFailing" not in (*task.FAIL_TO_PASS, *task.PASS_TO_PASS)


def test_multi_swe_bench_rows_of_other_languages_fail_clearly():
    row = {**multi_swe_bench_row(fake_commits()), "language": "php"}
    with pytest.raises(TaskError, match="expected one of"):
        to_task(row)
    row = {**multi_swe_bench_row(fake_commits()), "language": "typescript"}  # swebox's, not MSB's rules here
    with pytest.raises(TaskError, match="parser per typescript repository"):
        to_task(row)
    row = {**multi_swe_bench_row(fake_commits()), "language": "c"}
    with pytest.raises(TaskError, match="parser per c repository"):
        to_task(row)
    row = {**multi_swe_bench_row(fake_commits()), "base": {"sha": "main"}}
    with pytest.raises(TaskError, match="base_commit"):
        to_task(row)


def test_swe_rebench_v2_row_uses_its_install_config():
    row = swe_rebench_v2_row(fake_commits())
    assert detect(row) == "swe-rebench-v2"
    task = to_task(row)
    assert (task.language, task.grader, task.log_parser) == ("go", "log", "parse_log_gotest")
    assert task.test_cmd == "go test -v -count=1 ./cmp/cmpopts/"
    assert task.env.toolchains == ("go",) and task.env.install == ()
    assert task.metadata["install_config"]["base_image_name"] == "golang:1.19"
    # a list of commands, a JSON-string config, ANSI colour in the ids, the pytest parser's name
    row = {
        **row,
        "install_config": json.dumps(
            {**row["install_config"], "test_cmd": ["make build", "go test -v ./..."], "install": "go mod download"}
        ),
        "FAIL_TO_PASS": ["\x1b[32mTestEquateApproxMargin\x1b[0m"],
    }
    task = to_task(row)
    assert task.test_cmd == "make build\ngo test -v ./..." and task.env.install == ("go mod download",)
    assert task.FAIL_TO_PASS == ("TestEquateApproxMargin",)
    py = {
        **swe_rebench_v2_row(fake_commits()),
        "language": "python",
        "install_config": {"log_parser": "parse_log_pytest", "test_cmd": "pytest -rA"},
    }
    assert to_task(py).log_parser == "pytest" and to_task(py).env.toolchains == ()


def test_swe_rebench_v2_parser_swebox_lacks_is_a_clear_error():
    row = swe_rebench_v2_row(fake_commits())
    row["install_config"] = {**row["install_config"], "log_parser": "parse_log_elixir"}
    with pytest.raises(TaskError, match="parse_log_elixir"):
        to_task(row)


def test_swe_smith_go_row_starts_with_the_bug_and_is_graded_from_the_log():
    row = swe_smith_row(fake_commits())
    assert detect(row) == "swe-smith"
    task = to_task(row)
    assert (task.language, task.grader, task.log_parser) == ("go", "log", "go_test")
    assert task.repo == "google/go-cmp" and task.base_commit == "a" * 8 and task.env.toolchains == ("go",)
    assert task.bug_patch == row["patch"] and "+" + "\treturn math.Abs(x-y) <= math.Max" in task.patch
    assert task.test_cmd == "go test -v -count=1 ./..."


def test_rust_rows_of_each_format_become_rust_log_tasks():
    tasks = {name: to_task(row) for name, row in rust_rows(fake_commits()).items()}
    assert {n: (t.language, t.log_parser, t.env.toolchains) for n, t in tasks.items()} == {
        "msb": ("rust", lang_parsers.MSB_RUST, ("rust",)),
        "rebench": ("rust", "parse_log_cargo", ("rust",)),
        "smith": ("rust", "cargo", ("rust",)),
    }
    assert tasks["msb"].test_cmd == tasks["smith"].test_cmd == "cargo test --no-fail-fast"
    assert tasks["rebench"].test_cmd == "cargo test --offline --no-fail-fast"
    assert tasks["msb"].repo == "KokaKiwi/rust-hex" and tasks["smith"].bug_patch


def _swebench_row(repo: str, version: str) -> dict:
    return {
        "repo": repo,
        "instance_id": f"{repo.replace('/', '__')}-1",
        "base_commit": "b" * 40,
        "patch": "",
        "test_patch": "",
        "problem_statement": "p",
        "hints_text": "",
        "created_at": "2025-01-01",
        "version": version,
        "environment_setup_commit": "a" * 40,
        "FAIL_TO_PASS": '["TestA"]',
        "PASS_TO_PASS": "[]",
    }


def test_swe_bench_multilingual_go_and_rust_rows_load_from_swebench_specs():
    """Rows of SWE-bench Multilingual's Go and Rust repositories take swebench 4.1.0's install and test
    commands for their repo/version (constants/go.py, rust.py) and their repository's parser."""
    gin, ripgrep = to_task(_swebench_row("gin-gonic/gin", "3820")), to_task(_swebench_row("burntsushi/ripgrep", "2576"))
    assert (gin.language, gin.grader, gin.log_parser, gin.env.toolchains) == ("go", "log", "gin-gonic/gin", ("go",))
    assert gin.env.commit == "a" * 40 and gin.base_commit == "b" * 40 and gin.metadata["go_version"]
    assert gin.test_cmd.startswith("go test -v") and gin.env.install
    assert (ripgrep.language, ripgrep.log_parser, ripgrep.env.toolchains) == ("rust", "burntsushi/ripgrep", ("rust",))
    assert ripgrep.test_cmd == "RUSTFLAGS=-Awarnings cargo test --package ripgrep --test integration -- regression"
    assert ripgrep.metadata["rust_version"] == "1.81"
    with pytest.raises(TaskError, match="expected a version of gin-gonic/gin"):
        to_task(_swebench_row("gin-gonic/gin", "0.1"))


def test_swe_bench_multilingual_rows_of_ones_own_specs(tmp_path, monkeypatch):
    for language, toolchains in (("go", ("go",)), ("rust", ("rust",))):
        row, specs = swe_bench_multilingual_row(fake_commits(), language)
        (tmp_path / "specs.json").write_text(json.dumps(specs))
        monkeypatch.setenv("SWEBOX_SWE_SPECS", str(tmp_path / "specs.json"))
        task = to_task(row)
        assert (task.language, task.env.toolchains, task.env.install) == (language, toolchains, ())
        assert task.log_parser in ("gin-gonic/gin", "tokio-rs/tokio") and task.env.commit == row["base_commit"]
        del specs[row["repo"]]["1.0"]["log_parser"]
        (tmp_path / "specs.json").write_text(json.dumps(specs))
        with pytest.raises(TaskError, match="expected a log parser"):
            to_task({**row, "instance_id": row["instance_id"] + "x"})


# -- e2e: swebox tasks validate on rows of each format ------------------------------------------------------------
def go_rows(tmp_path: Path) -> tuple[dict[str, dict], dict[str, str], tuple[str, str]]:
    from tests.debian_tools import unpacked

    source = unpacked("go-cmp", ("golang-github-google-go-cmp-dev",)) / "usr/share/gocode/src/github.com/google/go-cmp"
    commits = make_mirror(source, tmp_path / "mirror")
    rows = {
        "msb": multi_swe_bench_row(commits),
        "rebench": swe_rebench_v2_row(commits),
        "smith": swe_smith_row(commits),
    }
    rows["msb"]["instance_id"] = "google__go-cmp-msb-1"
    rows["rebench"]["instance_id"] = "google__go-cmp-rebench-1"
    rows["multilingual"] = _multilingual(tmp_path, commits, "go")
    return rows, commits, ("TestEquateApproxMargin", "TestEquateApproxFraction")


def hex_rows(tmp_path: Path) -> tuple[dict[str, dict], dict[str, str], tuple[str, str]]:
    from tests.debian_tools import unpacked

    source = unpacked("hex", ("librust-hex-dev",)) / "usr/share/cargo/registry/hex-0.4.3"
    commits = make_rust_mirror(source, tmp_path / "mirror")
    lower = "        b'a'..=b'f' => Ok(c - b'a' + 10),\n"
    # fixes upper case and breaks lower case
    commits["wrong"] = commits["fix"].replace(" " + lower, "-" + lower + "+" + lower.replace(" + 10", ""))
    rows = {**rust_rows(commits), "multilingual": _multilingual(tmp_path, commits, "rust")}
    return rows, commits, ("decode_upper_case", "decode_lower_case")


def _multilingual(tmp_path: Path, commits: dict[str, str], language: str) -> dict:
    """The SWE-bench Multilingual row; its recipe goes to ``specs.json``, which the e2e run names by
    $SWEBOX_SWE_SPECS (swebench's tables do not know go-cmp or hex)."""
    row, specs = swe_bench_multilingual_row(commits, language)
    (tmp_path / "specs.json").write_text(json.dumps(specs))
    return row


def gtest_rows(tmp_path: Path) -> tuple[dict[str, dict], dict[str, str], tuple[str, str]]:
    from tests.debian_tools import unpacked

    source = unpacked("googletest", ("googletest",)) / "usr/src/googletest/googletest"
    commits = make_gtest_mirror(source, tmp_path / "mirror")
    return {"rebench": gtest_rebench_row(commits)}, commits, tuple(GT_F2P)


def doctest_rows(tmp_path: Path) -> tuple[dict[str, dict], dict[str, str], tuple[str, str]]:
    from tests.envs.tasks.graders.test_lang_logs import doctest_tree

    commits = make_doctest_mirror(doctest_tree(tmp_path / "src"), tmp_path / "mirror")
    return {"rebench": doctest_rebench_row(commits)}, commits, tuple(DT_F2P)


def test_swe_rebench_v2_cpp_row_is_a_googletest_task_on_the_cc_toolchain():
    task = to_task(gtest_rebench_row(fake_commits()))
    assert (task.language, task.grader, task.log_parser) == ("cpp", "log", "parse_log_googletest")
    assert task.env.toolchains == ("cc",) and task.test_cmd.endswith("&& /tmp/samples_unittest")
    assert list(task.FAIL_TO_PASS) == GT_F2P and task.repo == "google/googletest"


@pytest.mark.e2e
@pytest.mark.parametrize(
    "make_rows, toolchain",
    [(go_rows, "go"), (hex_rows, "rust"), (gtest_rows, "cc"), (doctest_rows, "cc")],
    ids=["go", "rust", "cpp-gtest", "cpp-doctest"],
)
def test_rows_of_each_format_validate_on_the_toolchain_layer(tmp_path, make_rows, toolchain):
    rows, commits, (passes, fails) = make_rows(tmp_path)
    assert commits["wrong"] != commits["fix"]
    store = str(row_store(tmp_path / "layers", (toolchain,)))
    # every format's row in one file: one build and one validate run for all of them, each row still built,
    # graded gold and empty, and reported
    report = build_and_validate(tmp_path, list(rows.values()), store)
    assert sorted(report) == sorted(row["instance_id"] for row in rows.values()), sorted(report)
    for r in report.values():
        assert r["passed"] and r["gold"]["resolved"] and not r["empty"]["resolved"], r
    # a wrong fix does not resolve, on the same layers
    bad = grade_from_store(store, to_task(next(iter(rows.values()))), commits["wrong"])  # the first format's row
    assert bad.applied and not bad.resolved and bad.tampered == [], (bad.errors, bad.output_tail)
    assert bad.tests[passes].status == "passed" and bad.tests[fails].status == "failed"


def test_multi_swe_bench_rules_keep_a_failure_over_a_later_pass():
    go = (
        "=== RUN   TestA\n--- FAIL: TestA (0.00s)\n--- PASS: TestA (0.00s)\n    --- SKIP: TestB/x\n"
        "FAIL\tex.com/p\t0.1s\n"
    )
    assert lang_parsers.parse_multi_swe_bench_go(go) == {"TestA": "FAILED", "TestB/x": "SKIPPED", "ex.com/p": "FAILED"}
    rust = "test a::b ... FAILED\ntest a::b ... ok\ntest c ... ignored\ntest d ... ok\n"
    assert lang_parsers.parse_multi_swe_bench_rust(rust) == {"a::b": "FAILED", "c": "SKIPPED", "d": "PASSED"}
