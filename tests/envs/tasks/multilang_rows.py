"""Rows of Multi-SWE-bench, SWE-rebench-V2 and SWE-smith (Go) in their own column formats, made from a real Go
project: Debian's go-cmp 0.5.9 in a git mirror (``OWNER__NAME.git``, read through ``$SWEBOX_GIT_MIRROR``),
with a real one-line bug in :data:`GO_FILE` and a test patch that catches it (the fixture of
``tests/envs/tasks/graders/test_lang_logs.py``). Shared by the loader tests and the validate run.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.envs.tasks.graders.test_lang_logs import (
    GO_BUG,
    GO_FILE,
    GO_FIX,
    GO_TESTS,
    GO_WRONG,
    line_patch,
    new_file_patch,
)

OWNER, NAME = "google", "go-cmp"
F2P = ["TestEquateApproxMargin", "TestEquateApproxFraction"]
P2P = ["TestEquateApproxFar", "TestPanic"]
TEST_FILE = "cmp/cmpopts/approx_test.go"


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args],
                          check=True, capture_output=True, text=True).stdout.strip()


def make_mirror(source: Path, mirror: Path) -> dict[str, str]:
    """A mirror of go-cmp with two commits: ``clean`` (Debian's source plus the approx tests, SWE-smith's
    snapshot) and ``base`` (the bug in, the tests out: the PR's base for Multi-SWE-bench / SWE-rebench-V2).
    Returns their ids and the patches the rows carry."""
    work = mirror.parent / "go-cmp-work"
    subprocess.run(["cp", "-r", str(source), str(work)], check=True)
    git(work, "init", "-q", "-b", "main")
    (work / TEST_FILE).write_text(GO_TESTS)
    git(work, "add", "-A")
    git(work, "commit", "-qm", "go-cmp 0.5.9 (Debian) with approx tests")
    clean = git(work, "rev-parse", "HEAD")
    text = (work / GO_FILE).read_text()
    (work / GO_FILE).write_text(text.replace(GO_FIX, GO_BUG))
    (work / TEST_FILE).unlink()
    git(work, "add", "-A")
    git(work, "commit", "-qm", "base: the bug, without the tests")
    base = git(work, "rev-parse", "HEAD")
    mirror.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "clone", "-q", "--bare", str(work), str(mirror / f"{OWNER}__{NAME}.git")], check=True)
    buggy = text.replace(GO_FIX, GO_BUG)
    return {"clean": clean, "base": base, "fix": line_patch(GO_FILE, buggy, GO_BUG, GO_FIX),
            "bug": line_patch(GO_FILE, text, GO_FIX, GO_BUG), "test": new_file_patch(TEST_FILE, GO_TESTS),
            "wrong": line_patch(GO_FILE, buggy, GO_BUG, GO_WRONG)}


def multi_swe_bench_row(c: dict[str, str]) -> dict:
    """Multi-SWE-bench's columns (its go/*.jsonl rows carry no language: the folder names it)."""
    def transition(run: str, test: str, fix: str) -> dict[str, str]:
        return {"run": run, "test": test, "fix": fix}

    return {
        "org": OWNER, "repo": NAME, "number": 1, "state": "closed", "title": "EquateApprox ignores the margin",
        "body": "", "base": {"label": f"{OWNER}:master", "ref": "master", "sha": c["base"]},
        "resolved_issues": [{"number": 2, "title": "EquateApprox(0, 0.1) says 1.0 != 1.05",
                             "body": "The margin should be used when it is larger than the fraction."}],
        "fix_patch": c["fix"], "test_patch": c["test"],
        "fixed_tests": {t: transition("NONE", "FAIL", "PASS") for t in F2P},
        "p2p_tests": {t: transition("PASS", "PASS", "PASS") for t in P2P},
        "f2p_tests": {}, "s2p_tests": {}, "n2p_tests": {t: transition("NONE", "FAIL", "PASS") for t in F2P},
        "run_result": {"passed_count": 40}, "test_patch_result": {"passed_count": 40},
        "fix_patch_result": {"passed_count": 43},
        "instance_id": f"{OWNER}__{NAME}-1", "language": "go",
    }


def swe_rebench_v2_row(c: dict[str, str]) -> dict:
    """SWE-rebench-V2's columns: SWE-bench's plus language, image_name and install_config."""
    return {
        "instance_id": f"{OWNER}__{NAME}-1", "repo": f"{OWNER}/{NAME}", "base_commit": c["base"],
        "patch": c["fix"], "test_patch": c["test"], "problem_statement": "EquateApprox ignores the margin.",
        "hints_text": "", "created_at": "2026-12-06T00:00:00Z", "version": "0.5",
        "FAIL_TO_PASS": F2P, "PASS_TO_PASS": P2P, "language": "go", "image_name": "swerebench/go-cmp:1",
        "install_config": {"base_image_name": "golang:1.19", "docker_specs": {"go_version": "1.19"},
                           "install": [], "log_parser": "parse_log_gotest",
                           "test_cmd": "go test -v -count=1 ./cmp/cmpopts/"},
    }


def swe_smith_row(c: dict[str, str]) -> dict:
    """SWE-smith's columns; its patch is the bug on the clean snapshot ``swesmith/OWNER__NAME.COMMIT8``."""
    return {
        "instance_id": f"{OWNER}__{NAME}.{c['clean'][:8]}.func_pm_op_swap__approx",
        "repo": f"swesmith/{OWNER}__{NAME}.{c['clean'][:8]}", "patch": c["bug"],
        "FAIL_TO_PASS": F2P, "PASS_TO_PASS": P2P, "created_at": "2026-12-06",
        "image_name": f"jyangballin/swesmith.x86_64.{OWNER}_1776_{NAME}.{c['clean'][:8]}",
        "problem_statement": "EquateApprox ignores the margin.",
    }
