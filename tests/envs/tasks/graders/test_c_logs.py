"""SWE-bench Multilingual's C log parsers on real test runs: Redis 7.0.15 (Debian's upstream tarball of the
redis source package) built by the cc toolchain layer, its own Tcl test suite run in a sandbox the way
SWE-bench's redis specs run it (``TERM=dumb ./runtest --durable --single unit/...``), and the log read by
``parse_log_redis`` (SWE-bench's key 'redis/redis'); jq 1.7.1 (Debian's upstream tarball of the jq source
package: the git tree, no ``configure``), bootstrapped with Debian's autotools and built by the cc layer as
SWE-bench's jq specs do (``autoreconf``, ``./configure``, ``make``), its own ``make check`` read by
``parse_log_jq`` ('jqlang/jq').

The tree is built once per module (``make MALLOC=libc``, into a layer over the project's); a graded run's
``make`` then recompiles only the patched file. Redis's Tcl runner is the host's ``tclsh`` (the sandbox sees
the host's /usr); the test skips without one. MicroPython is not run here (docs/tasks.md says why).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from swebox.envs.cache.toolchains import toolchain_env
from swebox.envs.sandbox import Layer, Sandbox, SandboxPolicy
from swebox.envs.sandbox.policy import DEFAULT_ENV
from swebox.envs.tasks import Task
from swebox.envs.tasks.graders import lang_parsers, log_grading, log_parsers
from swebox.envs.tasks.graders.grading import GradeReport, grade

from tests.debian_tools import orig_source, relocated
from tests.envs.tasks.graders.test_lang_logs import (
    discard,
    exports,
    line_patch,
    new_file_patch,
    planted,
    project_layer,
    toolchain_fixture,
)

pytestmark = pytest.mark.e2e

cc_layer = toolchain_fixture("cc")

# -- Redis 7.0.15: INCR/INCRBY's overflow check (src/t_string.c, incrDecrCommand) -----------------------------------
RD_FILE = "src/t_string.c"
RD_FIX = "        (incr > 0 && oldvalue > 0 && incr > (LLONG_MAX-oldvalue))) {\n"
RD_BUG = "        (incr > 0 && oldvalue > 0 && incr >= (LLONG_MAX-oldvalue))) {\n"  # refuses to reach LLONG_MAX
RD_WRONG = "        (incr > 0 && oldvalue > 0 && 0)) {\n"  # no overflow check on the way up at all
RD_TEST_FILE = "tests/unit/type/incr-limits.tcl"
RD_TESTS = """start_server {tags {"incr"}} {
    test {INCR up to the largest integer} {
        r set x 9223372036854775806
        r incr x
    } {9223372036854775807}

    test {INCRBY up to the largest integer} {
        r set x 9223372036854775800
        r incrby x 7
    } {9223372036854775807}

    test {INCRBY past the largest integer is refused} {
        r set x 9223372036854775800
        catch {r incrby x 8} err
        format $err
    } {ERR*overflow*}
}
"""
RD_MAKE = "make -j2 MALLOC=libc OPTIMIZATION=-O0"
"""Redis's own Makefile; libc's malloc instead of the bundled jemalloc (whose configure doubles the build),
-O0 instead of -O3 with link-time optimisation (the tests read behaviour, not speed);
graded runs repeat the same settings, so ``make`` rebuilds only what a patch touched."""
RD_CMD = f"{RD_MAKE} >/dev/null && TERM=dumb ./runtest --durable --single unit/type/incr --single unit/type/incr-limits"
"""SWE-bench's redis command shape on two real test files: Redis's own INCR suite and the test patch's."""


@pytest.fixture(scope="module")
def redis_src() -> Path:
    if shutil.which("tclsh") is None:
        pytest.skip("Redis's test runner needs tclsh (Debian's tcl) on the host")
    sha = "4b1dc4ee6d622a09fff9c6777191209750fb5e5a725ef78ea012d6eef4c22982"
    return orig_source("redis-7.0.15", "r/redis/redis_7.0.15.orig.tar.gz", sha)


def built(layers: list[Layer], command: str, tools: Path | None = None, **env: str) -> Layer:
    """``command`` run in /testbed over ``layers`` with the cc toolchain first on PATH (then ``tools``'
    usr/bin, bound read-only) and ``env``, frozen as a layer."""
    paths = toolchain_env(["cc"])
    binds: tuple[str, ...] = ()
    if tools is not None:
        paths["PATH"] = paths["PATH"] + f":{tools}/usr/bin"
        binds = (str(tools),)
    policy = SandboxPolicy(network="none", env={**DEFAULT_ENV, **paths, **env}, ro_binds=binds)
    with Sandbox(layers, policy) as sb:
        run = sb.exec(f"cd /testbed && {command} 2>&1", timeout=1800)
        assert run.exit_code == 0, run.output[-3000:]
        return sb.snapshot().persist()


@pytest.fixture(scope="module")
def redis_layers(redis_src, cc_layer):
    source = project_layer(redis_src, {RD_FILE: (RD_FIX, RD_BUG)})
    objects = built([cc_layer, source], f"{RD_MAKE} >/dev/null")
    yield [cc_layer, source, objects]
    discard(objects)
    discard(source)


def redis_task(redis_src: Path, parser: str = "redis/redis") -> Task:
    base = (redis_src / RD_FILE).read_text().replace(RD_FIX, RD_BUG)
    return Task(
        instance_id="redis__redis-incr-limit",
        repo="redis/redis",
        language="c",
        patch=line_patch(RD_FILE, base, RD_BUG, RD_FIX),
        test_patch=new_file_patch(RD_TEST_FILE, RD_TESTS),
        FAIL_TO_PASS=("INCR up to the largest integer", "INCRBY up to the largest integer"),
        PASS_TO_PASS=(
            "INCRBY past the largest integer is refused",
            "INCR against non existing key",
            "DECRBY negation overflow",
        ),
        grader="log",
        log_parser=parser,
        test_cmd=RD_CMD,
        eval_commands=exports("cc"),
    )


def test_redis_log_gold_resolves_empty_and_wrong_do_not(redis_layers, redis_src, monkeypatch):
    task = redis_task(redis_src)
    canaries = planted(monkeypatch)
    policy = SandboxPolicy(network="none")
    gold = grade(task, task.patch, layers=redis_layers, policy=policy, timeout=900)
    assert gold.log_status == "ok" and gold.errors == [] and gold.tampered == [], (gold.errors, gold.output_tail)
    assert gold.resolved and gold.reward == 1.0
    assert {o.status for o in gold.tests.values()} == {"passed"}
    empty = grade(task, "", layers=redis_layers, policy=policy, timeout=900)
    assert empty.log_status == "ok" and not empty.resolved and empty.tampered == [], (empty.errors, empty.output_tail)
    assert [empty.tests[t].status for t in task.FAIL_TO_PASS] == ["failed", "failed"]
    assert empty.p2p_passed == empty.p2p_total == 3
    wrong = task.patch.replace("+" + RD_FIX, "+" + RD_WRONG)
    assert wrong != task.patch
    bad = grade(task, wrong, layers=redis_layers, policy=policy, timeout=900)
    assert bad.applied and not bad.resolved and bad.tampered == [], (bad.errors, bad.output_tail)
    assert [bad.tests[t].status for t in task.FAIL_TO_PASS] == ["passed", "passed"]
    assert bad.tests["INCRBY past the largest integer is refused"].status == "failed"
    # Redis's Tcl tests register by name at run time: no canaries (LogCanaries.skipped says why)
    assert len(canaries) == 3 and all(c.file == "" and c.skipped for c in canaries)


def test_the_real_redis_log_reads_the_same_under_each_name_and_truncated_does_not_resolve(redis_layers, redis_src):
    """One real run of the bug and one of the fix, read by SWE-bench's key and its function name; the same
    log cut short or empty resolves nothing."""
    task = redis_task(redis_src)
    logs = {name: run_log(redis_layers, task, diff) for name, diff in (("bug", ""), ("fix", task.patch))}
    maps = {n: log_parsers.parse_log(n, logs["fix"]) for n in ("redis/redis", "parse_log_redis")}
    assert maps["redis/redis"] == maps["parse_log_redis"]
    fixed = maps["redis/redis"]
    assert "\\o/ All tests passed without errors!" in logs["fix"], logs["fix"][-2000:]
    assert len(fixed) > 25 and set(fixed.values()) == {"PASSED"}  # incr.tcl's own tests and the new ones
    broken = log_parsers.parse_log("redis/redis", logs["bug"])
    # Redis prints "[err]: NAME in tests/unit/...": SWE-bench's parser drops the file, so the name matches
    assert [broken[t] for t in task.FAIL_TO_PASS] == ["FAILED", "FAILED"]
    assert broken["INCRBY past the largest integer is refused"] == "PASSED"
    assert lang_parsers.language_of("redis/redis") == "c"

    def verdict(log: str) -> bool:
        report = GradeReport(task.instance_id, applied=True, log_status="ok")
        log_grading.score(task, report, log_parsers.parse_log(task.log_parser, log))
        return report.resolved

    assert verdict(logs["fix"]) and not verdict(logs["bug"]) and not verdict("")
    # cut before the test patch's file ran: its tests are missing, not passed
    cut = logs["fix"][: logs["fix"].index("[ok]: INCR up to the largest integer")]
    assert not verdict(cut)
    assert not verdict(logs["fix"].split("Testing unit/type/incr")[0])  # the build and the start only


def run_log(layers: list[Layer], task: Task, diff: str) -> str:
    """The raw output of the task's command on ``diff`` + test_patch (no grader around it)."""
    with Sandbox(layers, SandboxPolicy(network="none")) as sb:
        for i, patch in enumerate((diff, task.test_patch)):
            if patch:
                sb.write_file(f"/tmp/p{i}.diff", patch)
                assert sb.exec(f"cd /testbed && git apply /tmp/p{i}.diff", timeout=60).exit_code == 0
        command = " && ".join((*task.eval_commands, task.test_cmd))
        return sb.exec(f"cd /testbed && {command} 2>&1", timeout=900).output


# -- jq 1.7.1: startswith (src/builtin.c, f_startswith) ------------------------------------------------------------
JQ_FILE = "src/builtin.c"
JQ_FIX = "  if (blen <= alen && memcmp(jv_string_value(a), jv_string_value(b), blen) == 0)\n"
JQ_BUG = JQ_FIX.replace("blen <= alen", "blen < alen")  # a string no longer starts with itself
JQ_WRONG = "  if (blen <= alen)\n"  # any string no longer than the input "matches"
JQ_TEST_FILE = "tests/jq.test"
JQ_TESTS = """
# startswith of the whole string and of the empty string
[.[]|startswith("ab")]
["ab", "abc", "a", "xab"]
[true, true, false, false]

[.[]|startswith("")]
["", "x"]
[true, true]
"""
JQ_AUTOTOOLS = ("autoconf", "automake", "libtool", "m4", "autotools-dev")
JQ_BUILD = "autoreconf -i && ./configure CFLAGS=-O0 --with-oniguruma=no --disable-docs && make -j2"
"""SWE-bench's jq build without its submodule step, at -O0 (the tests read behaviour, not speed): Debian's
tarball has no modules/oniguruma, so jq is built without regular expressions (its onig tests are not in the
run)."""
JQ_CHECKS = "tests/jqtest tests/utf8test tests/base64test"
JQ_CMD = f"make -j2 >/dev/null && NO_VALGRIND=1 make check TESTS='{JQ_CHECKS}'"
"""``make check`` (SWE-bench's jq command) on three of jq's six test scripts: ``tests/shtest`` alone runs for
minutes on a busy machine. NO_VALGRIND: jq's tests/setup runs every jq under valgrind when the host has one."""


def append_patch(path: str, text: str, added: str) -> str:
    """A diff appending ``added`` to ``text`` (the file's base content, ending in a newline)."""
    lines, new = text.splitlines(keepends=True), added.splitlines(keepends=True)
    context = lines[-3:]
    start = len(lines) - len(context) + 1
    return (
        f"diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n"
        f"@@ -{start},{len(context)} +{start},{len(context) + len(new)} @@\n"
        + "".join(" " + x for x in context)
        + "".join("+" + x for x in new)
    )


@pytest.fixture(scope="module")
def jq_src() -> Path:
    sha = "fc75b1824aba7a954ef0886371d951c3bf4b6e0a921d1aefc553f309702d6ed1"
    return orig_source("jq-1.7.1", "j/jq/jq_1.7.1.orig.tar.gz", sha)


@pytest.fixture(scope="module")
def jq_layers(jq_src, cc_layer):
    tools = relocated(
        "autotools", JQ_AUTOTOOLS, {"usr/bin/automake": "automake-1.16", "usr/bin/aclocal": "aclocal-1.16"}
    )
    source = project_layer(jq_src, {JQ_FILE: (JQ_FIX, JQ_BUG)})
    # aclocal names its own macro folder by its version ('/usr/share/aclocal-' . $APIVERSION): the variable
    # aclocal reads instead
    acdir = str(tools / "usr/share/aclocal-1.16")
    objects = built([cc_layer, source], f"{JQ_BUILD} >/dev/null", tools, ACLOCAL_AUTOMAKE_DIR=acdir)
    yield [cc_layer, source, objects]
    discard(objects)
    discard(source)


def jq_task(jq_src: Path, parser: str = "jqlang/jq") -> Task:
    base = (jq_src / JQ_FILE).read_text().replace(JQ_FIX, JQ_BUG)
    return Task(
        instance_id="jqlang__jq-startswith",
        repo="jqlang/jq",
        language="c",
        patch=line_patch(JQ_FILE, base, JQ_BUG, JQ_FIX),
        test_patch=append_patch(JQ_TEST_FILE, (jq_src / JQ_TEST_FILE).read_text(), JQ_TESTS),
        FAIL_TO_PASS=("tests/jqtest",),
        PASS_TO_PASS=("tests/utf8test", "tests/base64test"),
        grader="log",
        log_parser=parser,
        test_cmd=JQ_CMD,
        eval_commands=exports("cc"),
    )


def test_jq_log_gold_resolves_empty_and_wrong_do_not(jq_layers, jq_src, monkeypatch):
    task = jq_task(jq_src)
    canaries = planted(monkeypatch)
    policy = SandboxPolicy(network="none")
    gold = grade(task, task.patch, layers=jq_layers, policy=policy, timeout=900)
    assert gold.log_status == "ok" and gold.errors == [] and gold.tampered == [], (gold.errors, gold.output_tail)
    assert gold.resolved and gold.reward == 1.0
    assert {o.status for o in gold.tests.values()} == {"passed"}
    empty = grade(task, "", layers=jq_layers, policy=policy, timeout=900)
    assert empty.log_status == "ok" and not empty.resolved and empty.tampered == [], (empty.errors, empty.output_tail)
    assert empty.tests["tests/jqtest"].status == "failed" and empty.p2p_passed == empty.p2p_total == 2
    wrong = task.patch.replace("+" + JQ_FIX, "+" + JQ_WRONG)
    assert wrong != task.patch
    bad = grade(task, wrong, layers=jq_layers, policy=policy, timeout=900)
    assert bad.applied and not bad.resolved and bad.tampered == [], (bad.errors, bad.output_tail)
    assert bad.tests["tests/jqtest"].status == "failed" and bad.p2p_passed == 2
    # jq's tests are cases in a text file run by one script: no canaries (LogCanaries.skipped says why)
    assert len(canaries) == 3 and all(c.file == "" and c.skipped for c in canaries)


def test_the_real_jq_log_reads_the_same_under_each_name_and_truncated_does_not_resolve(jq_layers, jq_src):
    task = jq_task(jq_src)
    logs = {name: run_log(jq_layers, task, diff) for name, diff in (("bug", ""), ("fix", task.patch))}
    fixed = log_parsers.parse_log("jqlang/jq", logs["fix"])
    assert fixed == log_parsers.parse_log("parse_log_jq", logs["fix"])
    # automake's harness: one line per test script, and its summary ("# PASS:  3") is no test
    assert fixed == dict.fromkeys(JQ_CHECKS.split(), "PASSED"), logs["fix"][-2000:]
    broken = log_parsers.parse_log("jqlang/jq", logs["bug"])
    assert broken == {**fixed, "tests/jqtest": "FAILED"}, logs["bug"][-2000:]
    assert lang_parsers.language_of("jqlang/jq") == "c"

    def verdict(log: str) -> bool:
        report = GradeReport(task.instance_id, applied=True, log_status="ok")
        log_grading.score(task, report, log_parsers.parse_log(task.log_parser, log))
        return report.resolved

    assert verdict(logs["fix"]) and not verdict(logs["bug"]) and not verdict("")
    cut = logs["fix"][: logs["fix"].index("PASS: tests/jqtest")]  # stopped while jqtest ran
    assert not verdict(cut)
