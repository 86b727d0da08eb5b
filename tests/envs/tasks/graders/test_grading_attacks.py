"""Issue 11's grading attack classes, each as a diff that leaves the bug in place (calc's add stays wrong).

Every one of these was graded resolved=True (or made grade() raise) before the verdict channel, the git
ground truth for diffs and pid 1's signal handling; each must now earn 0, with the reason in the report.
Class 1: code under test forging the verdict. Class 2: diffs the filter read differently from git. Class 3:
crashing instead of failing.

Each runs under both graders (``graded_task``: swebox's JUnit runner, and the log grader reading calc's
``pytest -rA`` log with SWE-bench's parser); the honest fix resolves under each (test_grading_tamper.py).
Where a case does not apply to the log grader, or holds there differently, the reason is next to it.
"""

from __future__ import annotations

import pytest
from swebox.envs.tasks.graders.grading import grade
from swebox.envs.tasks.graders.log_confirm import PREFIX as CONFIRM

from tests.envs.tasks.graders.test_grading_tamper import (
    PASS_ALL_CONFTEST,
    forged_reports,
    new_file,
    new_file_over_empty,
)

F2P = "tests/test_ops.py::test_add"
CALC_CASES = (
    ("tests.test_ops", "test_add"),
    ("tests.test_ops", "test_sub"),
    ("tests.test_ops", "test_mul"),
    ("tests.test_ops", "test_div"),
    ("tests.test_ops", "test_mul_commutes[1-2]"),
    ("tests.test_ops", "test_mul_commutes[0-0]"),
    ("tests.test_ops.TestMore", "test_sub_negative"),
)
_CASES_SRC = repr(CALC_CASES)
_FIND_CONFIG = (
    "import gc, _pytest.config\n"
    "def _register(plugin, name):\n"
    "    for _o in gc.get_objects():\n"
    "        if isinstance(_o, _pytest.config.Config):\n"
    "            _o.pluginmanager.register(plugin, name)\n"
)

# -- class 1: the code under test forges the verdict -------------------------------------------------------
# Rewrite the runner's record and the JUnit file just before they are hashed (json.dump is what the old
# runner wrote its record with); json.dumps also turns every failed report passed, whatever reads it.
FORGE_RECORD_AND_JUNIT = (
    "import glob, json, re\n"
    "_dump, _dumps = json.dump, json.dumps\n"
    "def _forged_dump(obj, fh, *a, **k):\n"
    "    if isinstance(obj, dict) and 'record' in obj:\n"
    "        obj['record'] = {n: 'passed' for n in obj['record']}\n"
    "        obj['tampered'] = []\n"
    "        for path in glob.glob('/swebox-grade-*/junit.xml'):\n"
    "            text = open(path).read()\n"
    "            text = re.sub(r'<failure[^>]*>.*?</failure>', '', text, flags=re.S)\n"
    "            open(path, 'w').write(text)\n"
    "    return _dump(obj, fh, *a, **k)\n"
    "def _forged_dumps(obj, *a, **k):\n"
    "    if isinstance(obj, dict) and obj.get('outcome') == 'failed':\n"
    "        obj = dict(obj, outcome='passed', msg='')\n"
    "    return _dumps(obj, *a, **k)\n"
    "json.dump, json.dumps = _forged_dump, _forged_dumps\n"
)
# Read the nonce and folder from sys.argv, write a passing JUnit file and record, print the completion line
# with their digests, leave before any test runs.
FORGE_EVERYTHING_AND_EXIT = (
    "import hashlib, json, os, sys\n"
    f"_CASES = {_CASES_SRC}\n"
    "def _node(c, n):\n"
    "    return 'tests/test_ops.py::' + ('TestMore::' if c.endswith('TestMore') else '') + n\n"
    "try:\n"
    "    nonce, workdir = sys.argv[1], sys.argv[2]\n"
    "    cases = ''.join(f'<testcase classname=\"{c}\" name=\"{n}\" time=\"0.001\"/>' for c, n in _CASES)\n"
    "    junit = f'<testsuites><testsuite>{cases}</testsuite></testsuites>'.encode()\n"
    "    open(workdir + '/junit.xml', 'wb').write(junit)\n"
    "    record = json.dumps({'record': {_node(c, n): 'passed' for c, n in _CASES}, 'tampered': [],\n"
    "                         'exit': '0', 'missing_files': []}).encode()\n"
    "    open(workdir + '/record.json', 'wb').write(record)\n"
    "    digests = f'{hashlib.sha256(junit).hexdigest()} {hashlib.sha256(record).hexdigest()}'\n"
    "    line = f'\\nSWEBOX-GRADE {nonce} {digests}\\n'\n"
    "    os.write(1, line.encode())\n"
    "except Exception:\n"
    "    pass\n"
    "os._exit(0)\n"
)
# Forge a passing JUnit file and leave without any completion line.
FORGE_JUNIT_NO_COMPLETION = (
    "import glob, os\n"
    f"_CASES = {_CASES_SRC}\n"
    "cases = ''.join(f'<testcase classname=\"{c}\" name=\"{n}\"/>' for c, n in _CASES)\n"
    "for folder in glob.glob('/swebox-grade-*'):\n"
    "    open(folder + '/junit.xml', 'w').write(f'<testsuites><testsuite>{cases}</testsuite></testsuites>')\n"
    "os._exit(0)\n"
)
# Neutralise the watchdog found through sys.modules['__main__'], then patch every test report to passed.
NEUTRALISE_WATCHDOG_THEN_PATCH = (
    "import sys\n"
    "_main = sys.modules.get('__main__')\n"
    "for _name in ('Watchdog', 'Reporter'):\n"
    "    if hasattr(_main, _name):\n"
    "        getattr(_main, _name).check = lambda self: []\n" + forged_reports()
)
# Targeted: only the task's failing tests are forged (the canaries stay honest), after switching the checks
# off by name in the runner's module (calc's test_add; the log task's test patch adds a second F2P test).
TARGETED_WITH_CHECKS_OFF = (
    "import sys\n"
    "_main = sys.modules.get('__main__')\n"
    "for _n in ('_check', 'check', '_critical_objects'):\n"
    "    if hasattr(_main, _n):\n"
    "        setattr(_main, _n, lambda *a, **k: [] if _n != '_critical_objects' else {})\n"
    "for _cls in ('Watchdog', 'Reporter'):\n"
    "    if hasattr(_main, _cls):\n"
    "        getattr(_main, _cls).check = lambda self: []\n" + forged_reports("test_add", "test_add_ids[one plus two]")
)
# A hook compiled with a file name ending in conftest.py (the old origin check trusted the name).
HOOK_NAMED_CONFTEST = (
    "import sys\n" + _FIND_CONFIG + f"_src = {PASS_ALL_CONFTEST!r} + '    report.longrepr = None\\n'\n"
    "_mod = type(sys)('conftest')\n"
    "_mod.__file__ = '/testbed/conftest.py'\n"
    "exec(compile(_src, '/testbed/conftest.py', 'exec'), _mod.__dict__)\n"
    "_register(_mod, 'conftest-helper')\n"
)
# A pytest_collection_modifyitems hook (not watched before) that replaces every test function.
MODIFYITEMS_REPLACES_TESTS = (
    _FIND_CONFIG + "class _Swap:\n"
    "    def pytest_collection_modifyitems(self, session, config, items):\n"
    "        for item in items:\n"
    "            if hasattr(item, 'obj'):\n"
    "                item.obj = lambda *a, **k: None\n"
    "_register(_Swap(), 'swap')\n"
)
# A forger that knows the new channel (the event pipe's fd is the runner's last argument) but not the
# canaries: it streams a complete run where every test it can see passes, then leaves.
FORGE_THE_EVENT_STREAM = (
    "import json, os, sys\n"
    f"_CASES = {_CASES_SRC}\n"
    "if sys.argv[0].endswith('pytest_runner.py') and sys.argv[-1].isdigit():\n"
    "    fd = int(sys.argv[-1])\n"
    "    ids = ['tests/test_ops.py::' + ('TestMore::' if c.endswith('TestMore') else '') + n for c, n in _CASES]\n"
    "    events = [{'e': 'collected', 'ids': ids}]\n"
    "    for i in ids:\n"
    "        for when in ('setup', 'call', 'teardown'):\n"
    "            events.append({'e': 'report', 'id': i, 'when': when, 'outcome': 'passed', 'xfail': False,\n"
    "                           'dur': 0.0, 'msg': ''})\n"
    "    events += [{'e': 'check', 'problems': []}, {'e': 'finish', 'exit': 0, 'missing_files': []}]\n"
    "    os.write(fd, ''.join(json.dumps(e) + '\\n' for e in events).encode())\n"
    "    os._exit(0)\n"
)

FORGERS = {
    "rewrite the record and JUnit before hashing": FORGE_RECORD_AND_JUNIT,
    "forge everything from sys.argv and os._exit": FORGE_EVERYTHING_AND_EXIT,
    "forge JUnit, no completion line": FORGE_JUNIT_NO_COMPLETION,
    "neutralise the watchdog, patch the reports": NEUTRALISE_WATCHDOG_THEN_PATCH,
    "a hook compiled as conftest.py": HOOK_NAMED_CONFTEST,
    "targeted forging with the checks switched off": TARGETED_WITH_CHECKS_OFF,
    "collection_modifyitems replaces every test": MODIFYITEMS_REPLACES_TESTS,
    "forge the new event stream without the canaries": FORGE_THE_EVENT_STREAM,
}


def _no_reward(report) -> None:
    assert not report.resolved and report.reward == 0.0, report.to_dict()


def _ran(report) -> bool:
    """The tests ran to the end and their results were believed (signed verdict / signed, complete log)."""
    return report.verdict == "ok" or report.log_status == "ok"


LOG_CANARY = "canary test tests/test_"
# The log grader runs the repository's own command: no swebox code is in the tested process, so nothing
# watches pytest from inside (the JUnit grader's watchdog). A forger that singles out the task's failing
# test by patching pytest's reports, leaving the canaries honest, prints a genuine-looking log (the official
# harness believes it too): test_add is reported passed in the log. The confirmation (log_confirm.py: the F2P and P2P
# tests again under swebox's runner, for pytest-family logs) is what catches it; docs/tasks.md ("What the log
# grader can and cannot guarantee").
LOG_GAP = "targeted forging with the checks switched off"


@pytest.mark.parametrize("name", sorted(FORGERS))
def test_code_under_test_cannot_forge_the_verdict(calc_layer, graded_task, name):
    report = grade(graded_task, new_file_over_empty("calc/__init__.py", FORGERS[name]), layers=[calc_layer])
    assert report.applied and report.dropped == [], report.to_dict()
    # either the forgery changed nothing the verdict sees (the test still fails), or it fooled pytest's own
    # reports and is caught; it earns nothing
    fooled = F2P not in report.tests or report.tests[F2P].status != "failed"
    assert not fooled or report.errors or report.tampered, report.to_dict()
    _no_reward(report)
    if graded_task.grader == "log" and name == LOG_GAP:  # the log believed it; the runner's rerun did not
        assert report.tests[F2P].status == "passed" and report.confirm == "failed", report.to_dict()
        assert CONFIRM + "replaced: _pytest.reports.TestReport.from_item_and_call" in report.tampered, report.tampered


def test_forging_all_reports_passed_is_caught_by_the_canaries(calc_layer, graded_task):
    # the watchdog is neutralised first, so only the canary planted to fail can tell
    report = grade(
        graded_task, new_file_over_empty("calc/__init__.py", NEUTRALISE_WATCHDOG_THEN_PATCH), layers=[calc_layer]
    )
    assert report.tests[F2P].status == "passed"  # the forgery worked on pytest's reports ...
    assert any(t.startswith("canary test ") and "planted to be failed" in t.lower() for t in report.tampered)
    _no_reward(report)  # ... and earns nothing


def test_a_hook_compiled_under_a_conftest_name_is_seen_by_the_watchdog(calc_layer, graded_task):
    report = grade(graded_task, new_file_over_empty("calc/__init__.py", HOOK_NAMED_CONFTEST), layers=[calc_layer])
    # no watchdog under the log grader: the hook passes everything, the canary planted to fail included
    seen = "plugin registered at run time from outside pytest: 'conftest-helper'"
    seen = seen if graded_task.grader == "junit" else LOG_CANARY
    assert any(t.startswith(seen) for t in report.tampered), report.tampered
    _no_reward(report)


# junit only: this is the watchdog's own check; the log run has none (its confirmation runs this one: LOG_GAP above)
def test_targeted_forging_is_seen_by_the_original_checks(calc_layer, calc_task):
    report = grade(calc_task, new_file_over_empty("calc/__init__.py", TARGETED_WITH_CHECKS_OFF), layers=[calc_layer])
    assert report.tests[F2P].status == "passed" and not any("canary" in t for t in report.tampered)
    assert "replaced: _pytest.reports.TestReport.from_item_and_call" in report.tampered, report.tampered
    assert "replaced: __main__._check" in report.tampered, report.tampered
    _no_reward(report)


def test_an_xfail_from_the_buggy_function_is_not_a_pass(calc_layer, graded_task, gold):
    diff = gold["add"].replace("+    return a + b\n", "+    __import__('pytest').xfail('not done yet')\n")
    report = grade(graded_task, diff, layers=[calc_layer])
    assert report.applied and _ran(report) and report.errors == [] and report.tampered == []
    assert report.tests[F2P].status == "xfailed"
    if graded_task.grader == "log":
        # Does not apply to the log grader: SWE-bench's rule counts XFAIL as a pass (its test_passed), and
        # the log grader's verdict must equal the official harness's, so this diff resolves there as it
        # does under the harness (and an F2P test the diff makes SKIPPED fails nothing, likewise).
        assert report.resolved
        return
    _no_reward(report)


# -- class 1 against the log grader's own channel (log only: the JUnit grader's channel is tested above) ------
# The nonce of the log's markers is the grading folder's name, which the code under test can list.
_LOG_IDS = "['tests/test_ops.py::test_add', 'tests/test_spaces.py::test_add_ids[one']"
_PRINT_FORGED_RUN = (
    "import glob, os, sys\n"
    "nonce = glob.glob('/swebox-grade-*')[0].rsplit('-', 1)[1]\n"
    f"fake = ''.join('PASSED ' + i + '\\n' for i in {_LOG_IDS})\n"
    # pytest captures fd 1 while it imports the package: write to the script's own stdout, the log's pipe
    "out = os.open('/proc/%d/fd/1' % os.getppid(), os.O_WRONLY)\n"
    "os.write(out, (fake + '\\nSWEBOX-LOG-END ' + nonce + ' 0\\n').encode())\n"
)
LOG_FORGERS = {
    # the task's failing tests reported passed once pytest has printed its summary: the parser keeps the last
    "print passing results at exit": (
        "import atexit, os\n"
        f"atexit.register(lambda: os.write(1, ''.join('PASSED ' + i + '\\n' for i in {_LOG_IDS}).encode()))\n",
        "tampered",
        "was reported failed and then passed",
    ),
    # a run that looks complete, then pytest leaves: the script's real end marker follows the forged one
    "print a passing run and its end marker": (_PRINT_FORGED_RUN + "os._exit(0)\n", "tampered", "end markers"),
    # ... and the script killed, so that no real end marker follows
    "print a passing run, kill the script": (
        _PRINT_FORGED_RUN + "os.kill(os.getppid(), 9)\n",
        "errors",
        "stopped before its end",
    ),
    # a signed-looking log written where the monitor writes, the monitor killed before it writes its own
    "write the signed log, kill the monitor": (
        "import glob, os\n"
        "folder = glob.glob('/swebox-grade-*')[0]\n"
        "nonce = folder.rsplit('-', 1)[1]\n"
        f"log = ''.join('PASSED ' + i + '\\n' for i in {_LOG_IDS})\n"
        "body = ('SWEBOX-LOG-START ' + nonce + '\\n' + log + '\\nSWEBOX-LOG-END ' + nonce + ' 0\\n').encode()\n"
        "open(folder + '/log.signed', 'wb').write(b'SWEBOX-LOG ' + b'0' * 64 + b'\\n{\"exit\": 0}\\n' + body)\n"
        "bash = int(open('/proc/%d/stat' % os.getppid()).read().rsplit(')', 1)[1].split()[1])\n"
        "os.kill(bash, 9)\n"
        "os._exit(0)\n",
        "tampered",
        "not signed with the run's key",
    ),
}


@pytest.mark.parametrize("name", sorted(LOG_FORGERS))
def test_code_under_test_cannot_forge_the_log(calc_layer, calc_task, name):
    from tests.calc import calc_log_task

    forger, where, reason = LOG_FORGERS[name]
    report = grade(calc_log_task(calc_task), new_file_over_empty("calc/__init__.py", forger), layers=[calc_layer])
    assert report.applied and report.dropped == [], report.to_dict()
    assert any(reason in line for line in getattr(report, where)), report.to_dict()
    _no_reward(report)


# -- class 2: diffs that the filter reads differently from git ---------------------------------------------
HIDE = "conftest.py\n.gitignore\n"
BINARY_SECTION = (
    "diff --git a/calc/data.bin b/calc/data.bin\nnew file mode 100644\n"
    "index 0000000000000000000000000000000000000000..0f49c4ae77b43dff338093c78e009676e7e308ba\n"
    "GIT binary patch\nliteral 9\nQcmZQzWJ=1+ODw7c00^)Gi2wiq\n\nliteral 0\nHcmV?d00001\n\n"
)


def plain_new_file(path: str, text: str, cr: bool = False) -> str:
    """A plain (no ``diff --git`` line) section creating ``path``; with ``cr`` the +++ line ends in CR."""
    lines = text.splitlines(keepends=True)
    return f"--- /dev/null\n+++ b/{path}{chr(13) if cr else ''}\n@@ -0,0 +1,{len(lines)} @@\n" + "".join(
        "+" + line for line in lines
    )


def test_a_binary_patch_cannot_smuggle_a_conftest_and_a_gitignore(calc_layer, graded_task):
    # git ends the binary section at its blank line; the old parser ran it on to the next `diff --git`
    diff = BINARY_SECTION + plain_new_file("conftest.py", PASS_ALL_CONFTEST) + new_file(".gitignore", HIDE)
    report = grade(graded_task, diff, layers=[calc_layer])
    dropped = dict(report.dropped)
    assert dropped["conftest.py"].startswith("conftest.py") and dropped[".gitignore"].startswith("git control")
    assert report.applied and _ran(report) and report.tampered == []
    assert report.tests[F2P].status == "failed"
    _no_reward(report)


def test_a_carriage_return_after_a_path_is_refused(calc_layer, graded_task):
    # git drops the CR and creates conftest.py; the old filter judged 'conftest.py\r', an allowed name
    diff = plain_new_file("conftest.py", PASS_ALL_CONFTEST, cr=True) + new_file(".gitignore", HIDE)
    report = grade(graded_task, diff, layers=[calc_layer])
    assert not report.applied and any("refused" in e for e in report.errors), report.to_dict()
    _no_reward(report)


@pytest.mark.parametrize(
    "path, text, reason",
    [
        ("pytest.toml", '[pytest]\naddopts = ["-p", "no:python"]\n', "test configuration"),
        (".gitignore", "calc/\n", "git control file"),
        (".gitattributes", "*.py -diff\n", "git control file"),
    ],
)
def test_config_git_reads_or_pytest_9_reads_is_dropped(calc_layer, graded_task, path, text, reason):
    report = grade(graded_task, new_file(path, text), layers=[calc_layer])
    assert dict(report.dropped)[path].startswith(reason), report.dropped
    assert report.tests[F2P].status == "failed"
    _no_reward(report)


def test_a_symlink_written_with_a_leading_zero_mode_is_dropped(calc_layer, graded_task):
    diff = (
        "diff --git a/calc/link b/calc/link\nnew file mode 0120000\n--- /dev/null\n+++ b/calc/link\n"
        "@@ -0,0 +1 @@\n+../tests/test_ops.py\n\\ No newline at end of file\n"
    )
    report = grade(graded_task, diff, layers=[calc_layer])
    assert dict(report.dropped)["calc/link"] == "symlink", report.dropped
    assert report.tests[F2P].status == "failed"
    _no_reward(report)


# -- class 3: crashing instead of failing ------------------------------------------------------------------
def test_kill_int_1_from_the_code_under_test_is_an_ordinary_failure(calc_layer, graded_task):
    diff = new_file_over_empty("calc/__init__.py", "import os, signal\nos.kill(1, signal.SIGINT)\n")
    report = grade(graded_task, diff, layers=[calc_layer])  # raised SandboxError before
    assert _ran(report) and report.tests[F2P].status == "failed", report.to_dict()
    _no_reward(report)


def test_killing_the_monitor_earns_nothing(calc_layer, graded_task):
    diff = new_file_over_empty("calc/__init__.py", "import os\nos.kill(os.getppid(), 9)\n")
    report = grade(graded_task, diff, layers=[calc_layer])
    # the JUnit grader's monitor is pytest's parent; under the log grader the parent is the test script's bash,
    # and the log monitor sees it killed before its end
    stopped = report.verdict == "missing" if graded_task.grader == "junit" else report.log_status == "unfinished"
    assert stopped and report.errors, report.to_dict()
    _no_reward(report)


def test_a_diff_no_parser_can_read_gives_zero_instead_of_raising(calc_layer, graded_task, gold):
    # a C-quoted path ending in half an escape made the filter raise before any sandbox started
    broken = 'diff --git "a/calc/\\x" "b/calc/\\x"\n--- "a/calc/\\x"\n+++ "b/calc/\\x"\n@@ -1 +1 @@\n-a\n+b\n'
    report = grade(graded_task, gold["add"] + broken, layers=[calc_layer])
    assert report.errors, report.to_dict()
    _no_reward(report)
