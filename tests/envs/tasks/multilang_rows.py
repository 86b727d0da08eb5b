"""Rows of Multi-SWE-bench, SWE-rebench-V2 and SWE-smith in their own column formats, made from real projects:
Debian's go-cmp 0.5.9 (Go), hex 0.4.3 (Rust), GoogleTest 1.12.1 and doctest 2.4.9 (C++, SWE-rebench-V2 only)
in a git mirror (``OWNER__NAME.git``, read through ``$SWEBOX_GIT_MIRROR``), each with a real one-line bug and a
test file that catches it (the fixtures of ``tests/envs/tasks/graders/test_lang_logs.py``). Shared by the
loader tests and the validate run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.envs.tasks.graders.test_lang_logs import (
    DT_BUG,
    DT_CMD,
    DT_FILE,
    DT_FIX,
    DT_TEST_FILE,
    DT_TESTS,
    DT_WRONG,
    GO_BUG,
    GO_FILE,
    GO_FIX,
    GO_TESTS,
    GO_WRONG,
    GT_BUG,
    GT_CMD,
    GT_FILE,
    GT_FIX,
    GT_TEST_FILE,
    GT_TESTS,
    GT_WRONG,
    RS_BUG,
    RS_FILE,
    RS_FIX,
    RS_TESTS,
    line_patch,
    new_file_patch,
    offline_manifest,
)

OWNER, NAME = "google", "go-cmp"
F2P = ["TestEquateApproxMargin", "TestEquateApproxFraction"]
P2P = ["TestEquateApproxFar", "TestPanic"]
TEST_FILE = "cmp/cmpopts/approx_test.go"


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()


def make_mirror(source: Path, mirror: Path) -> dict[str, str]:
    """A mirror of go-cmp with two commits: ``clean`` (Debian's source plus the approx tests, SWE-smith's
    snapshot) and ``base`` (the bug in, the tests out: the PR's base for Multi-SWE-bench / SWE-rebench-V2).
    Returns their ids and the patches the rows carry."""
    c = _mirror(source, mirror, f"{OWNER}__{NAME}", GO_FILE, GO_FIX, GO_BUG, TEST_FILE, GO_TESTS, prepare=None)
    return {**c, "wrong": line_patch(GO_FILE, c["buggy"], GO_BUG, GO_WRONG)}


RS_OWNER, RS_NAME = "KokaKiwi", "rust-hex"
RS_TEST_FILE = "tests/cases.rs"


def make_rust_mirror(source: Path, mirror: Path) -> dict[str, str]:
    """The same for the hex crate, made offline-buildable as in test_lang_logs (no bench, no dependencies)."""

    def prepare(work: Path) -> None:
        subprocess.run(["rm", "-rf", str(work / "benches"), str(work / "tests")], check=True)
        (work / "Cargo.toml").write_text(offline_manifest((work / "Cargo.toml").read_text()))
        for name in (RS_FILE, "src/error.rs"):
            path = work / name
            path.write_text(path.read_text().replace("    use pretty_assertions::assert_eq;\n", ""))

    return _mirror(source, mirror, f"{RS_OWNER}__{RS_NAME}", RS_FILE, RS_FIX, RS_BUG, RS_TEST_FILE, RS_TESTS, prepare)


def _mirror(
    source: Path, mirror: Path, name: str, path: str, fix: str, bug: str, test_file: str, tests: str, prepare
) -> dict[str, str]:
    work = mirror.parent / f"{name}-work"
    subprocess.run(["cp", "-r", str(source), str(work)], check=True)
    if prepare:
        prepare(work)
    git(work, "init", "-q", "-b", "main")
    (work / test_file).parent.mkdir(parents=True, exist_ok=True)
    (work / test_file).write_text(tests)
    git(work, "add", "-A")
    git(work, "commit", "-qm", "Debian's source with the new tests")
    clean = git(work, "rev-parse", "HEAD")
    text = (work / path).read_text()
    (work / path).write_text(text.replace(fix, bug))
    (work / test_file).unlink()
    git(work, "add", "-A")
    git(work, "commit", "-qm", "base: the bug, without the tests")
    base = git(work, "rev-parse", "HEAD")
    mirror.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "clone", "-q", "--bare", str(work), str(mirror / f"{name}.git")], check=True)
    buggy = text.replace(fix, bug)
    return {
        "clean": clean,
        "base": base,
        "fix": line_patch(path, buggy, bug, fix),
        "buggy": buggy,
        "bug": line_patch(path, text, fix, bug),
        "test": new_file_patch(test_file, tests),
    }


def multi_swe_bench_row(c: dict[str, str]) -> dict:
    """Multi-SWE-bench's columns (its go/*.jsonl rows carry no language: the folder names it)."""

    def transition(run: str, test: str, fix: str) -> dict[str, str]:
        return {"run": run, "test": test, "fix": fix}

    return {
        "org": OWNER,
        "repo": NAME,
        "number": 1,
        "state": "closed",
        "title": "EquateApprox ignores the margin",
        "body": "",
        "base": {"label": f"{OWNER}:master", "ref": "master", "sha": c["base"]},
        "resolved_issues": [
            {
                "number": 2,
                "title": "EquateApprox(0, 0.1) says 1.0 != 1.05",
                "body": "The margin should be used when it is larger than the fraction.",
            }
        ],
        "fix_patch": c["fix"],
        "test_patch": c["test"],
        "fixed_tests": {t: transition("NONE", "FAIL", "PASS") for t in F2P},
        "p2p_tests": {t: transition("PASS", "PASS", "PASS") for t in P2P},
        "f2p_tests": {},
        "s2p_tests": {},
        "n2p_tests": {t: transition("NONE", "FAIL", "PASS") for t in F2P},
        "run_result": {"passed_count": 40},
        "test_patch_result": {"passed_count": 40},
        "fix_patch_result": {"passed_count": 43},
        "instance_id": f"{OWNER}__{NAME}-1",
        "language": "go",
    }


def swe_rebench_v2_row(c: dict[str, str]) -> dict:
    """SWE-rebench-V2's columns: SWE-bench's plus language, image_name and install_config."""
    return {
        "instance_id": f"{OWNER}__{NAME}-1",
        "repo": f"{OWNER}/{NAME}",
        "base_commit": c["base"],
        "patch": c["fix"],
        "test_patch": c["test"],
        "problem_statement": "EquateApprox ignores the margin.",
        "hints_text": "",
        "created_at": "2026-12-06T00:00:00Z",
        "version": "0.5",
        "FAIL_TO_PASS": F2P,
        "PASS_TO_PASS": P2P,
        "language": "go",
        "image_name": "swerebench/go-cmp:1",
        "install_config": {
            "base_image_name": "golang:1.19",
            "docker_specs": {"go_version": "1.19"},
            "install": [],
            "log_parser": "parse_log_gotest",
            "test_cmd": "go test -v -count=1 ./cmp/cmpopts/",
        },
    }


def swe_smith_row(c: dict[str, str]) -> dict:
    """SWE-smith's columns; its patch is the bug on the clean snapshot ``swesmith/OWNER__NAME.COMMIT8``."""
    return {
        "instance_id": f"{OWNER}__{NAME}.{c['clean'][:8]}.func_pm_op_swap__approx",
        "repo": f"swesmith/{OWNER}__{NAME}.{c['clean'][:8]}",
        "patch": c["bug"],
        "FAIL_TO_PASS": F2P,
        "PASS_TO_PASS": P2P,
        "created_at": "2026-12-06",
        "image_name": f"jyangballin/swesmith.x86_64.{OWNER}_1776_{NAME}.{c['clean'][:8]}",
        "problem_statement": "EquateApprox ignores the margin.",
    }


RS_F2P = ["decode_upper_case", "decode_mixed_case"]
RS_P2P = ["decode_lower_case", "test::test_decode"]
RS_SMITH_F2P = ["test::test_from_hex_okay_str", "test::test_from_hex_okay_bytes"]
RS_SMITH_P2P = ["test::test_decode", "test::test_encode"]


def rust_rows(c: dict[str, str]) -> dict[str, dict]:
    """One hex row per format: Multi-SWE-bench (``cargo test``), SWE-rebench-V2 (its own offline command and
    ``parse_log_cargo``), SWE-smith (the bug on the clean snapshot; its unit tests' paths as ids)."""
    msb = multi_swe_bench_row(c)
    msb.update(
        org=RS_OWNER,
        repo=RS_NAME,
        language="rust",
        instance_id=f"{RS_OWNER}__{RS_NAME}-msb-1",
        base={"label": "", "ref": "master", "sha": c["base"]},
        fixed_tests={t: {"run": "NONE", "test": "FAIL", "fix": "PASS"} for t in RS_F2P},
        n2p_tests={t: {"run": "NONE", "test": "FAIL", "fix": "PASS"} for t in RS_F2P},
        p2p_tests={t: {"run": "PASS", "test": "PASS", "fix": "PASS"} for t in RS_P2P},
    )
    rebench = swe_rebench_v2_row(c)
    rebench.update(
        instance_id=f"{RS_OWNER}__{RS_NAME}-rebench-1",
        repo=f"{RS_OWNER}/{RS_NAME}",
        language="rust",
        FAIL_TO_PASS=RS_F2P,
        PASS_TO_PASS=RS_P2P,
        install_config={
            "install": [],
            "log_parser": "parse_log_cargo",
            "test_cmd": "cargo test --offline --no-fail-fast",
        },
    )
    smith = swe_smith_row(c)
    smith.update(
        instance_id=f"{RS_OWNER}__{RS_NAME}.{c['clean'][:8]}.func_pm_remove_assign__upper",
        repo=f"swesmith/{RS_OWNER}__{RS_NAME}.{c['clean'][:8]}",
        FAIL_TO_PASS=RS_SMITH_F2P,
        PASS_TO_PASS=RS_SMITH_P2P,
    )
    return {"msb": msb, "rebench": rebench, "smith": smith}


GT_OWNER, GT_NAME = "google", "googletest"
GT_F2P = ["IsPrimeSquaresTest.NineIsNotPrime", "IsPrimeSquaresTest.OddSquaresAreNotPrime"]
GT_P2P = ["IsPrimeSquaresTest.OddPrimes", "IsPrimeTest.Positive", "FactorialTest.Positive"]


def make_gtest_mirror(source: Path, mirror: Path) -> dict[str, str]:
    """The same for GoogleTest's own tree (gtest and its samples), the bug in samples/sample1.cc."""
    c = _mirror(source, mirror, f"{GT_OWNER}__{GT_NAME}", GT_FILE, GT_FIX, GT_BUG, GT_TEST_FILE, GT_TESTS, None)
    return {**c, "wrong": line_patch(GT_FILE, c["buggy"], GT_BUG, GT_WRONG)}


def gtest_rebench_row(c: dict[str, str]) -> dict:
    """A C++ SWE-rebench-V2 row: its install config names the test command (compile and run the gtest binary)
    and ``parse_log_googletest``."""
    row = swe_rebench_v2_row(c)
    row.update(
        instance_id=f"{GT_OWNER}__{GT_NAME}-rebench-1",
        repo=f"{GT_OWNER}/{GT_NAME}",
        language="cpp",
        problem_statement="IsPrime(9) and IsPrime(25) return true.",
        version="1.12",
        FAIL_TO_PASS=GT_F2P,
        PASS_TO_PASS=GT_P2P,
        image_name="swerebench/googletest:1",
        install_config={
            "base_image_name": "gcc:12",
            "install": [],
            "log_parser": "parse_log_googletest",
            "test_cmd": GT_CMD,
        },
    )
    return row


DT_OWNER, DT_NAME = "doctest", "doctest"
DT_CASE = "approx within a relative margin > "
DT_F2P = [DT_CASE + "the larger value on the left", DT_CASE + "the larger value on the right"]
DT_P2P = [DT_CASE + "far apart", "subcases with changing names > outer 0"]


def make_doctest_mirror(source: Path, mirror: Path) -> dict[str, str]:
    """The same for doctest's header and example suite, the bug in doctest.h's Approx."""
    c = _mirror(source, mirror, f"{DT_OWNER}__{DT_NAME}", DT_FILE, DT_FIX, DT_BUG, DT_TEST_FILE, DT_TESTS, None)
    return {**c, "wrong": line_patch(DT_FILE, c["buggy"], DT_BUG, DT_WRONG)}


def doctest_rebench_row(c: dict[str, str]) -> dict:
    """A C++ SWE-rebench-V2 row read by ``parse_log_doctest`` (the test binary's ``-s -r=xml`` report)."""
    row = swe_rebench_v2_row(c)
    row.update(
        instance_id=f"{DT_OWNER}__{DT_NAME}-rebench-1",
        repo=f"{DT_OWNER}/{DT_NAME}",
        language="cpp",
        problem_statement="Approx(110.5).epsilon(0.1) does not equal 100.0.",
        version="2.4",
        FAIL_TO_PASS=DT_F2P,
        PASS_TO_PASS=DT_P2P,
        image_name="swerebench/doctest:1",
        install_config={
            "base_image_name": "gcc:12",
            "install": [],
            "log_parser": "parse_log_doctest",
            "test_cmd": DT_CMD,
        },
    )
    return row


def swe_bench_multilingual_row(c: dict[str, str], language: str) -> tuple[dict, dict]:
    """A SWE-bench Multilingual row (SWE-bench's keys only) of go-cmp or hex, and the ``$SWEBOX_SWE_SPECS`` table
    that gives its recipe (swebench's Go/Rust tables know neither repository): swebench's spec keys, and the
    parser of a SWE-bench Multilingual repository of the language by its key (gin's ``parse_log_gotest``, tokio's
    ``parse_log_cargo``), as a row of those repositories is read."""
    go = language == "go"
    repo = f"{OWNER}/{NAME}" if go else f"{RS_OWNER}/{RS_NAME}"
    row = {
        "repo": repo,
        "instance_id": f"{repo.replace('/', '__')}-multilingual-1",
        "base_commit": c["base"],
        "environment_setup_commit": c["base"],
        "patch": c["fix"],
        "test_patch": c["test"],
        "problem_statement": "EquateApprox ignores the margin." if go else "decode rejects upper case hex.",
        "hints_text": "",
        "created_at": "2026-12-06T00:00:00Z",
        "version": "1.0",
        "FAIL_TO_PASS": F2P if go else RS_F2P,
        "PASS_TO_PASS": P2P if go else RS_P2P,
    }
    spec = {
        "language": language,
        "log_parser": "gin-gonic/gin" if go else "tokio-rs/tokio",
        "install": [],
        "test_cmd": ["go test -v -count=1 ./cmp/cmpopts/"] if go else ["cargo test --offline --no-fail-fast"],
        "docker_specs": {"go_version": "1.19"} if go else {"rust_version": "1.63"},
    }
    return row, {repo: {"1.0": spec}}


def build_and_validate(folder: Path, rows: list[dict], store: str) -> dict[str, dict]:
    """``swebox cache build`` then ``swebox tasks validate`` of ``rows`` (in one file: rows of one repository at
    one commit share what they can), as a user runs them, with the git mirror and the specs file under
    ``folder``; each must exit 0. Returns validate's JSON report by instance id."""
    env = {**os.environ, "SWEBOX_GIT_MIRROR": str(folder / "mirror"), "SWEBOX_SWE_SPECS": str(folder / "specs.json")}
    swebox = [sys.executable, "-m", "swebox.scripts.cli"]
    rows_file, report = str(folder / "rows.jsonl"), folder / "report.jsonl"
    Path(rows_file).write_text("".join(json.dumps(row) + "\n" for row in rows))
    for argv in (
        ["cache", "--store", store, "build", "--tasks", rows_file],
        ["tasks", "validate", rows_file, "--layers", store, "--json", str(report)],
    ):
        done = subprocess.run([*swebox, *argv], env=env, capture_output=True, text=True, timeout=1800)
        assert done.returncode == 0, (argv[:2], done.stdout[-3000:] + done.stderr[-2000:])
    return {r["instance_id"]: r for r in map(json.loads, report.read_text().splitlines())}


def grade_from_store(store: str, task, diff: str):
    """``diff`` graded for ``task`` over the store's layers (the ones validate used)."""
    from swebox.envs.tasks.graders.grading import grade
    from swebox.envs.tasks.validate import StoreLayers

    resolve = StoreLayers(store)
    try:
        return grade(task, diff, layers=resolve(task), timeout=900)
    finally:
        resolve.release(task)
        resolve.close()
