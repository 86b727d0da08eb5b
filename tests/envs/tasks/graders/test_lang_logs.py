"""Go, Rust and C++ log grading on real test suites in real sandboxes: Debian's go-cmp with ``go test -v`` and
Debian's hex crate with ``cargo test``, built by the go and rust toolchain layers (Debian's Go 1.19 and rustc
1.63), and GoogleTest 1.12.1's samples (Debian's googletest) and doctest 2.4.9's examples (doctest-dev) built by
the cc toolchain layer. The projects' sources come from Debian's packages too (:mod:`tests.debian_tools`).

Each project gets a real one-line bug in its base commit; a test patch adds tests that fail on the bug. The
gold patch resolves, the empty diff does not, a wrong fix does not, and the planted canaries come out as
planted. The same real logs are read by every parser name that reaches these formats (SWE-bench's repository
keys and function names, the generic names, Multi-SWE-bench's rules).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
from pathlib import Path

import pytest
from swebox.envs.cache.toolchains import toolchain_env
from swebox.envs.sandbox import Layer, Sandbox, SandboxPolicy
from swebox.envs.sandbox.policy import DEFAULT_ENV
from swebox.envs.tasks import Task
from swebox.envs.tasks.graders import lang_parsers, log_canaries, log_parsers
from swebox.envs.tasks.graders.grading import grade

from tests.debian_tools import toolchain_store, unpacked
from tests.fixture_env import PYTEST, build_layer, wheels

pytestmark = pytest.mark.e2e

# -- Go: github.com/google/go-cmp 0.5.9 (golang-github-google-go-cmp-dev) ----------------------------------------
GO_FILE = "cmp/cmpopts/equate.go"
GO_FIX = "\treturn math.Abs(x-y) <= math.Max(a.marg, relMarg)\n"
GO_BUG = "\treturn math.Abs(x-y) <= math.Min(a.marg, relMarg)\n"
GO_WRONG = "\treturn math.Abs(x-y) <= math.Max(a.marg, relMarg/100)\n"  # a fraction a hundred times too small
GO_TESTS = """package cmpopts

import (
\t"testing"

\t"github.com/google/go-cmp/cmp"
)

func TestEquateApproxMargin(t *testing.T) {
\tif !cmp.Equal(1.0, 1.05, EquateApprox(0, 0.1)) {
\t\tt.Error("1.05 is within 0.1 of 1.0")
\t}
}

func TestEquateApproxFraction(t *testing.T) {
\tif !cmp.Equal(100.0, 104.0, EquateApprox(0.05, 0)) {
\t\tt.Error("104 is within 5% of 100")
\t}
}

func TestEquateApproxFar(t *testing.T) {
\tif cmp.Equal(1.0, 2.0, EquateApprox(0.1, 0.1)) {
\t\tt.Error("2 is not within 0.1 or 10% of 1")
\t}
}
"""


def new_file_patch(path: str, text: str) -> str:
    lines = text.splitlines(keepends=True)
    return (
        f"diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n+++ b/{path}\n"
        f"@@ -0,0 +1,{len(lines)} @@\n" + "".join("+" + line for line in lines)
    )


def line_patch(path: str, text: str, old: str, new: str) -> str:
    """A diff replacing the line ``old`` of ``text`` (the file's base content) by ``new``, with 3 lines of context."""
    lines = text.splitlines(keepends=True)
    i = lines.index(old)
    lo, hi = max(0, i - 3), min(len(lines), i + 4)
    before, after = lines[lo:i], lines[i + 1 : hi]
    n = len(before) + 1 + len(after)
    return (
        f"diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n@@ -{lo + 1},{n} +{lo + 1},{n} @@\n"
        + "".join(" " + x for x in before)
        + "-"
        + old
        + "+"
        + new
        + "".join(" " + x for x in after)
    )


def project_layer(
    source: Path,
    edits: dict[str, tuple[str, str]],
    drop: tuple[str, ...] = (),
    line_edits: dict[str, tuple[str, str]] | None = None,
) -> Layer:
    """An env layer: ``source`` copied to /testbed with ``edits`` (path -> (old, new) text) and ``drop``ped
    paths, committed in git, and a /venv for the log monitor."""

    def prepare(sb: Sandbox) -> None:
        assert sb.exec(f"mkdir -p /testbed && cp -r {source}/. /testbed/", timeout=120).exit_code == 0
        for path in drop:
            sb.exec(f"rm -rf /testbed/{path}", timeout=60)
        for path, (old, new) in edits.items():
            text = (source / path).read_text()
            assert old in text, (path, old)
            sb.write_file(f"/testbed/{path}", text.replace(old, new))

    return build_layer(prepare, [PYTEST], wheels([PYTEST]), "project", binds=(str(source),))


def discard(layer: Layer) -> None:
    from swebox.envs.sandbox.layers import record_path

    shutil.rmtree(layer.path, ignore_errors=True)
    record_path(layer.path).unlink(missing_ok=True)


def toolchain_fixture(name: str):
    """A module fixture: the toolchain layer ``name`` from the shared test store, released at the module's end."""

    @pytest.fixture(scope="module")
    def layer():
        from swebox.envs.cache.toolchains import release_toolchain_layers, toolchain_layer

        yield toolchain_layer(name, toolchain_store())
        release_toolchain_layers()

    return layer


def exports(name: str, **offline: str) -> tuple[str, ...]:
    """The eval command that puts toolchain ``name``'s environment first (what a task env with that toolchain
    gets from the grader), plus ``offline`` settings."""
    env = {**toolchain_env([name]), **offline}
    return ("export " + " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items()),)


go_toolchain = toolchain_fixture("go")
rust_toolchain = toolchain_fixture("rust")
cc_layer = toolchain_fixture("cc")


@pytest.fixture(scope="module")
def go_cmp() -> Path:
    return unpacked("go-cmp", ("golang-github-google-go-cmp-dev",)) / "usr/share/gocode/src/github.com/google/go-cmp"


@pytest.fixture(scope="module")
def go_layer(go_cmp):
    layer = project_layer(go_cmp, {GO_FILE: (GO_FIX, GO_BUG)})
    yield layer
    discard(layer)


def go_task(go_cmp: Path, parser: str = "go_test") -> Task:
    base = (go_cmp / GO_FILE).read_text().replace(GO_FIX, GO_BUG)
    return Task(
        instance_id="google__go-cmp-approx",
        repo="google/go-cmp",
        language="go",
        patch=line_patch(GO_FILE, base, GO_BUG, GO_FIX),
        test_patch=new_file_patch("cmp/cmpopts/approx_test.go", GO_TESTS),
        FAIL_TO_PASS=("TestEquateApproxMargin", "TestEquateApproxFraction"),
        PASS_TO_PASS=("TestEquateApproxFar", "TestPanic"),
        grader="log",
        log_parser=parser,
        test_cmd="go test -v -count=1 ./cmp/cmpopts/",
        eval_commands=exports("go", GOPROXY="off", GOFLAGS="-mod=mod", CGO_ENABLED="0"),
    )


def planted(monkeypatch) -> list[log_canaries.LogCanaries]:
    """Records the canaries each grade plants (the grader's own plant, observed)."""
    seen: list[log_canaries.LogCanaries] = []
    real = log_canaries.plant
    monkeypatch.setattr(log_canaries, "plant", lambda *args: seen.append(real(*args)) or seen[-1])
    return seen


def test_go_test_log_gold_resolves_empty_and_wrong_do_not(go_layer, go_cmp, go_toolchain, monkeypatch):
    task = go_task(go_cmp)
    canaries = planted(monkeypatch)
    policy = SandboxPolicy(network="none")
    gold = grade(task, task.patch, layers=[go_toolchain, go_layer], policy=policy, timeout=600)
    assert gold.log_status == "ok" and gold.errors == [] and gold.tampered == [], (gold.errors, gold.output_tail)
    assert gold.resolved and gold.reward == 1.0
    assert {o.status for o in gold.tests.values()} == {"passed"}
    empty = grade(task, "", layers=[go_toolchain, go_layer], policy=policy, timeout=600)
    assert empty.log_status == "ok" and not empty.resolved and empty.tampered == []
    assert [empty.tests[t].status for t in task.FAIL_TO_PASS] == ["failed", "failed"]
    assert empty.p2p_passed == empty.p2p_total == 2
    wrong = task.patch.replace("+" + GO_FIX, "+" + GO_WRONG)
    assert wrong != task.patch
    bad = grade(task, wrong, layers=[go_toolchain, go_layer], policy=policy, timeout=600)
    assert bad.applied and not bad.resolved and bad.tampered == []
    assert bad.tests["TestEquateApproxMargin"].status == "passed"
    assert bad.tests["TestEquateApproxFraction"].status == "failed"
    # every run got a passing and a failing canary in the test patch's file, and they came out as planted
    assert [c.file for c in canaries] == ["cmp/cmpopts/approx_test.go"] * 3
    assert all(sorted(c.expected.values()) == ["FAILED", "PASSED"] for c in canaries)


def test_the_real_go_log_reads_the_same_under_each_go_parser_name(go_layer, go_cmp, go_toolchain):
    """One real run, read by SWE-bench's key and function name, the generic name and Multi-SWE-bench's rule."""
    task = go_task(go_cmp)
    log = run_log([go_toolchain, go_layer], task, task.patch)
    names = ["go_test", "parse_log_gotest", "gin-gonic/gin", lang_parsers.MSB_GO]
    maps = {n: log_parsers.parse_log(n, log) for n in names}
    tests = {k: v for k, v in maps["go_test"].items()}
    assert tests["TestEquateApproxMargin"] == "PASSED" and len(tests) > 50  # go-cmp's whole cmpopts suite
    assert all(maps[n] == tests for n in names[:3])
    # Multi-SWE-bench's rule also records the package's own line
    assert maps[lang_parsers.MSB_GO] == {**tests, "github.com/google/go-cmp/cmp/cmpopts": "PASSED"}


def run_log(layers: list[Layer], task: Task, diff: str) -> str:
    """The raw output of the task's command on ``diff`` + test_patch (no grader around it)."""
    with Sandbox(layers, SandboxPolicy(network="none")) as sb:
        for i, patch in enumerate((diff, task.test_patch)):
            sb.write_file(f"/tmp/p{i}.diff", patch)
            assert sb.exec(f"cd /testbed && git apply /tmp/p{i}.diff", timeout=60).exit_code == 0
        run = sb.exec(
            "cd /testbed && " + " && ".join(task.eval_commands) + " && " + task.test_cmd + " 2>&1", timeout=600
        )
        return run.output


# -- Rust: the hex crate 0.4.3 (librust-hex-dev) ------------------------------------------------------------------
RS_FILE = "src/lib.rs"
RS_FIX = "        b'A'..=b'F' => Ok(c - b'A' + 10),\n"
RS_BUG = "        b'A'..=b'F' => Ok(c - b'A'),\n"
RS_LOWER = "        b'a'..=b'f' => Ok(c - b'a' + 10),\n"
RS_TESTS = """#[test]
fn decode_upper_case() {
    assert_eq!(hex::decode("666F6F").unwrap(), b"foo");
}

#[test]
fn decode_mixed_case() {
    assert_eq!(hex::decode("4a4B").unwrap(), vec![0x4a, 0x4b]);
}

#[test]
fn decode_lower_case() {
    assert_eq!(hex::decode("666f6f").unwrap(), b"foo");
}
"""


def offline_manifest(text: str) -> str:
    """Debian's Cargo.toml of hex without its bench target and its (optional and dev) dependencies: none is in
    the sandbox's offline registry. The library and its own unit tests need none of them."""
    text = re.sub(r'\n\[\[bench\]\]\nname = "hex"\nharness = false\n', "\n", text)
    section = re.compile(r"^\[(dev-)?dependencies\.[^\]]+\]\n(?:[^\[\n][^\n]*\n)*", re.MULTILINE)
    return section.sub("", text)


@pytest.fixture(scope="module")
def hex_crate() -> Path:
    return unpacked("hex", ("librust-hex-dev",)) / "usr/share/cargo/registry/hex-0.4.3"


@pytest.fixture(scope="module")
def rust_layer(hex_crate):
    lib = (hex_crate / RS_FILE).read_text().replace("    use pretty_assertions::assert_eq;\n", "")
    error = (hex_crate / "src/error.rs").read_text().replace("    use pretty_assertions::assert_eq;\n", "")
    manifest = (hex_crate / "Cargo.toml").read_text()
    edits = {
        RS_FILE: ((hex_crate / RS_FILE).read_text(), lib.replace(RS_FIX, RS_BUG)),
        "src/error.rs": ((hex_crate / "src/error.rs").read_text(), error),
        "Cargo.toml": (manifest, offline_manifest(manifest)),
    }
    layer = project_layer(hex_crate, edits, drop=("benches", "tests"))
    yield layer
    discard(layer)


def rust_task(hex_crate: Path, parser: str = "cargo") -> Task:
    base = (hex_crate / RS_FILE).read_text().replace("    use pretty_assertions::assert_eq;\n", "")
    base = base.replace(RS_FIX, RS_BUG)
    return Task(
        instance_id="kokakiwi__rust-hex-upper",
        repo="KokaKiwi/rust-hex",
        language="rust",
        patch=line_patch(RS_FILE, base, RS_BUG, RS_FIX),
        test_patch=new_file_patch("tests/cases.rs", RS_TESTS),
        FAIL_TO_PASS=("decode_upper_case", "decode_mixed_case"),
        PASS_TO_PASS=("decode_lower_case", "test::test_decode", "test::test_encode"),
        grader="log",
        log_parser=parser,
        test_cmd="cargo test --offline --no-fail-fast",
        eval_commands=exports("rust", CARGO_TARGET_DIR="/tmp/cargo-target", CARGO_NET_OFFLINE="true"),
    )


def test_cargo_test_log_gold_resolves_empty_and_wrong_do_not(rust_layer, hex_crate, rust_toolchain, monkeypatch):
    task = rust_task(hex_crate)
    canaries = planted(monkeypatch)
    policy = SandboxPolicy(network="none")
    gold = grade(task, task.patch, layers=[rust_toolchain, rust_layer], policy=policy, timeout=600)
    assert gold.log_status == "ok" and gold.errors == [] and gold.tampered == [], (gold.errors, gold.output_tail)
    assert gold.resolved and {o.status for o in gold.tests.values()} == {"passed"}
    empty = grade(task, "", layers=[rust_toolchain, rust_layer], policy=policy, timeout=600)
    assert empty.log_status == "ok" and not empty.resolved and empty.tampered == []
    assert [empty.tests[t].status for t in task.FAIL_TO_PASS] == ["failed", "failed"]
    assert empty.p2p_passed == empty.p2p_total == 3
    # fixes upper case and breaks lower case: the F2P tests pass, a P2P one fails
    wrong = task.patch.replace(" " + RS_LOWER, "-" + RS_LOWER + "+" + RS_LOWER.replace(" + 10", ""))
    assert wrong != task.patch
    bad = grade(task, wrong, layers=[rust_toolchain, rust_layer], policy=policy, timeout=600)
    assert bad.applied and not bad.resolved and bad.tampered == [], (bad.errors, bad.output_tail)
    assert bad.tests["decode_upper_case"].status == "passed"
    assert bad.tests["decode_lower_case"].status == "failed"
    assert [c.file for c in canaries] == ["tests/cases.rs"] * 3
    assert all(sorted(c.expected.values()) == ["FAILED", "PASSED"] for c in canaries)


def test_the_real_cargo_log_reads_the_same_under_each_rust_parser_name(rust_layer, hex_crate, rust_toolchain):
    task = rust_task(hex_crate)
    log = run_log([rust_toolchain, rust_layer], task, task.patch)
    names = ["cargo", "parse_log_cargo", "tokio-rs/tokio", lang_parsers.MSB_RUST]
    maps = {n: log_parsers.parse_log(n, log) for n in names}
    assert maps["cargo"]["decode_upper_case"] == "PASSED" and maps["cargo"]["test::test_decode"] == "PASSED"
    assert all(maps[n] == maps["cargo"] for n in names), maps


# -- C++: GoogleTest 1.12.1's samples (googletest), built by the cc toolchain layer (Debian's gcc 12) ------------
GT_FILE = "samples/sample1.cc"
GT_FIX = "    if (i > n / i) break;\n"
GT_BUG = "    if (i >= n / i) break;\n"  # stops one divisor early: the odd squares of primes (9, 25, 49) are "prime"
GT_WRONG = "    if (i >= n / i) return n != 9;\n"  # special-cases the reported number, not the rule
GT_TEST_FILE = "samples/prime_squares_unittest.cc"
GT_TESTS = """#include "sample1.h"
#include "gtest/gtest.h"

TEST(IsPrimeSquaresTest, NineIsNotPrime) { EXPECT_FALSE(IsPrime(9)); }

TEST(IsPrimeSquaresTest, OddSquaresAreNotPrime) {
  EXPECT_FALSE(IsPrime(25));
  EXPECT_FALSE(IsPrime(49));
}

TEST(IsPrimeSquaresTest, OddPrimes) {
  EXPECT_TRUE(IsPrime(3));
  EXPECT_TRUE(IsPrime(29));
}
"""
GT_CMD = (
    "g++ -std=c++14 -pthread -Iinclude -I. -o /tmp/samples_unittest samples/sample1.cc "
    f"samples/sample1_unittest.cc {GT_TEST_FILE} src/gtest-all.cc src/gtest_main.cc && /tmp/samples_unittest"
)
"""Compiles GoogleTest itself with the samples (as its own CMake build does) and runs the one binary; it names
the test_patch file, so the run gets canaries (:mod:`swebox.envs.tasks.graders.log_canaries`)."""


@pytest.fixture(scope="module")
def gtest_src() -> Path:
    return unpacked("googletest", ("googletest",)) / "usr/src/googletest/googletest"


@pytest.fixture(scope="module")
def gtest_layer(gtest_src):
    layer = project_layer(gtest_src, {GT_FILE: (GT_FIX, GT_BUG)})
    yield layer
    discard(layer)


def gtest_task(gtest_src: Path, parser: str = "googletest") -> Task:
    base = (gtest_src / GT_FILE).read_text().replace(GT_FIX, GT_BUG)
    return Task(
        instance_id="google__googletest-prime-squares",
        repo="google/googletest",
        language="cpp",
        patch=line_patch(GT_FILE, base, GT_BUG, GT_FIX),
        test_patch=new_file_patch(GT_TEST_FILE, GT_TESTS),
        FAIL_TO_PASS=("IsPrimeSquaresTest.NineIsNotPrime", "IsPrimeSquaresTest.OddSquaresAreNotPrime"),
        PASS_TO_PASS=("IsPrimeSquaresTest.OddPrimes", "IsPrimeTest.Positive", "FactorialTest.Positive"),
        grader="log",
        log_parser=parser,
        test_cmd=GT_CMD,
        # the cc layer's PATH (what a task env with toolchains=("cc",) gets from the grader)
        eval_commands=exports("cc"),
    )


def test_googletest_log_gold_resolves_empty_and_wrong_do_not(gtest_layer, cc_layer, gtest_src, monkeypatch):
    task = gtest_task(gtest_src)
    canaries = planted(monkeypatch)
    policy = SandboxPolicy(network="none")
    gold = grade(task, task.patch, layers=[cc_layer, gtest_layer], policy=policy, timeout=900)
    assert gold.log_status == "ok" and gold.errors == [] and gold.tampered == [], (gold.errors, gold.output_tail)
    assert gold.resolved and gold.reward == 1.0
    assert {o.status for o in gold.tests.values()} == {"passed"}
    empty = grade(task, "", layers=[cc_layer, gtest_layer], policy=policy, timeout=900)
    assert empty.log_status == "ok" and not empty.resolved and empty.tampered == [], (empty.errors, empty.output_tail)
    assert [empty.tests[t].status for t in task.FAIL_TO_PASS] == ["failed", "failed"]
    assert empty.p2p_passed == empty.p2p_total == 3
    wrong = task.patch.replace("+" + GT_FIX, "+" + GT_WRONG)
    assert wrong != task.patch
    bad = grade(task, wrong, layers=[cc_layer, gtest_layer], policy=policy, timeout=900)
    assert bad.applied and not bad.resolved and bad.tampered == [], (bad.errors, bad.output_tail)
    assert bad.tests["IsPrimeSquaresTest.NineIsNotPrime"].status == "passed"
    assert bad.tests["IsPrimeSquaresTest.OddSquaresAreNotPrime"].status == "failed"
    # a TEST(Suite, Name) pair in the test patch's file (the command compiles it), read back as planted
    assert [c.file for c in canaries] == [GT_TEST_FILE] * 3
    assert all(sorted(c.expected.values()) == ["FAILED", "PASSED"] for c in canaries)
    assert all(re.fullmatch(r"[A-Za-z]+\.[A-Za-z]+", name) for c in canaries for name in c.expected)


def test_the_real_googletest_log_reads_the_same_under_each_googletest_name(gtest_layer, cc_layer, gtest_src):
    """One real run, read by the generic name, SWE-bench's function name and fmt's repository key."""
    task = gtest_task(gtest_src)
    with Sandbox(
        [cc_layer, gtest_layer], SandboxPolicy(network="none", env={**DEFAULT_ENV, **toolchain_env(["cc"])})
    ) as sb:
        for i, patch in enumerate((task.patch, task.test_patch)):
            sb.write_file(f"/tmp/p{i}.diff", patch)
            assert sb.exec(f"cd /testbed && git apply /tmp/p{i}.diff", timeout=60).exit_code == 0
        assert sb.exec("command -v g++", timeout=30).output.startswith("/opt/toolchains/cc/")  # the layer's
        log = sb.exec(f"cd /testbed && {task.test_cmd} 2>&1", timeout=900).output
    assert "[  PASSED  ] 9 tests." in log, log[-2000:]  # sample1's 6 tests and the 3 new ones
    names = ["googletest", "parse_log_googletest", "fmtlib/fmt"]
    maps = {n: log_parsers.parse_log(n, log) for n in names}
    assert maps["googletest"]["IsPrimeSquaresTest.OddSquaresAreNotPrime"] == "PASSED"
    assert all(maps[n] == maps["googletest"] for n in names)
    assert lang_parsers.language_of("parse_log_googletest") == "c" and lang_parsers.language_of("fmtlib/fmt") == "cpp"


# -- C++: doctest 2.4.9's own example suite (doctest-dev), its XML report read by parse_log_doctest -------------
DT_FILE = "doctest/doctest.h"
DT_FIX = "           rhs.m_epsilon * (rhs.m_scale + std::max<double>(std::fabs(lhs), std::fabs(rhs.m_value)));\n"
DT_BUG = DT_FIX.replace("std::max<double>", "std::min<double>")  # the margin scales with the smaller value
DT_WRONG = "           rhs.m_epsilon * (rhs.m_scale + std::fabs(lhs));\n"  # with the left-hand value only
DT_TEST_FILE = "tests/approx.cpp"
DT_TESTS = """#include <doctest/doctest.h>

TEST_CASE("approx within a relative margin") {
    SUBCASE("the larger value on the right") { CHECK(100.0 == doctest::Approx(110.5).epsilon(0.1)); }
    SUBCASE("the larger value on the left") { CHECK(110.5 == doctest::Approx(100.0).epsilon(0.1)); }
    SUBCASE("far apart") { CHECK_FALSE(100.0 == doctest::Approx(200.0).epsilon(0.1)); }
}
"""
_DT_EX = "examples/all_features"
DT_CMD = (
    f"g++ -std=c++11 -I. -o /tmp/doctest_run {_DT_EX}/main.cpp {_DT_EX}/asserts_used_outside_of_tests.cpp "
    f"{_DT_EX}/subcases.cpp {DT_TEST_FILE} && /tmp/doctest_run -s -r=xml"
)
"""doctest's example main with its subcase examples (some fail on purpose: they show doctest's failure
output) and the test patch's file; ``-s -r=xml`` is the report SWE-bench's ``parse_log_doctest`` reads."""


def doctest_tree(parent: Path) -> Path:
    """doctest's header and its examples as one tree below ``parent`` (Debian installs them in two folders)."""
    root = unpacked("doctest", ("doctest-dev",))
    tree = parent / "doctest-2.4.9"
    shutil.copytree(root / "usr/include/doctest", tree / "doctest")
    shutil.copytree(root / "usr/share/doc/doctest-dev/examples", tree / "examples")
    os.chmod(parent, 0o755)
    return tree


@pytest.fixture(scope="module")
def doctest_src(tmp_path_factory) -> Path:
    return doctest_tree(tmp_path_factory.mktemp("doctest"))


@pytest.fixture(scope="module")
def doctest_layer(doctest_src):
    layer = project_layer(doctest_src, {DT_FILE: (DT_FIX, DT_BUG)})
    yield layer
    discard(layer)


def doctest_task(doctest_src: Path, parser: str = "parse_log_doctest") -> Task:
    base = (doctest_src / DT_FILE).read_text().replace(DT_FIX, DT_BUG)
    case = "approx within a relative margin > "
    return Task(
        instance_id="doctest__doctest-approx",
        repo="doctest/doctest",
        language="cpp",
        patch=line_patch(DT_FILE, base, DT_BUG, DT_FIX),
        test_patch=new_file_patch(DT_TEST_FILE, DT_TESTS),
        FAIL_TO_PASS=(case + "the larger value on the right", case + "the larger value on the left"),
        PASS_TO_PASS=(
            case + "far apart",
            "subcases with changing names > outer 0",
            "subcases can be used in a separate function as well > sc1",
        ),
        grader="log",
        log_parser=parser,
        test_cmd=DT_CMD,
        eval_commands=exports("cc"),
    )


def test_doctest_xml_log_gold_resolves_empty_and_wrong_do_not(doctest_layer, cc_layer, doctest_src, monkeypatch):
    task = doctest_task(doctest_src)
    canaries = planted(monkeypatch)
    layers, policy = [cc_layer, doctest_layer], SandboxPolicy(network="none")
    gold = grade(task, task.patch, layers=layers, policy=policy, timeout=900)
    assert gold.log_status == "ok" and gold.errors == [] and gold.tampered == [], (gold.errors, gold.output_tail)
    assert gold.resolved and {o.status for o in gold.tests.values()} == {"passed"}
    empty = grade(task, "", layers=layers, policy=policy, timeout=900)
    assert empty.log_status == "ok" and not empty.resolved and empty.tampered == [], (empty.errors, empty.output_tail)
    assert [empty.tests[t].status for t in task.FAIL_TO_PASS] == ["failed", "failed"]
    assert empty.p2p_passed == empty.p2p_total == 3
    wrong = task.patch.replace("+" + DT_FIX, "+" + DT_WRONG)
    assert wrong != task.patch
    bad = grade(task, wrong, layers=layers, policy=policy, timeout=900)
    assert bad.applied and not bad.resolved and bad.tampered == [], (bad.errors, bad.output_tail)
    assert bad.tests[task.FAIL_TO_PASS[1]].status == "passed" and bad.tests[task.FAIL_TO_PASS[0]].status == "failed"
    # doctest registers its tests per binary and reports XML: no canaries (LogCanaries.skipped says why)
    assert all(c.file == "" and "other than GoogleTest" in c.skipped for c in canaries) and len(canaries) == 3


def test_parsers_know_their_language_and_names_resolve():
    assert lang_parsers.language_of("go_test") == "go" and lang_parsers.language_of("cargo") == "rust"
    assert lang_parsers.language_of("jqlang/jq") == "c" and lang_parsers.language_of("fmtlib/fmt") == "cpp"
    assert lang_parsers.language_of("django/django") == ""
    for name in (
        "go_test",
        "cargo",
        "googletest",
        "parse_log_gotest",
        "parse_log_redis",
        "gin-gonic/gin",
        lang_parsers.MSB_GO,
        lang_parsers.MSB_RUST,
    ):
        assert log_parsers.check_parser_name(name) == "" and name in log_parsers.parser_names()
    assert "no log parser" in log_parsers.check_parser_name("nope/nope")
    assert "go_test" in log_parsers.check_parser_name("gotest")  # not a name: the fix lists the real ones
