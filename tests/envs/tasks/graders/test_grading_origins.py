"""Issue 31's attacks on the pytest grading path (classes 1-4 and 11), each a diff that leaves calc's bug in place.

Every forger here singles out the task's failing test (``test_add``) and leaves the canaries honest, unless
it says otherwise, so only the defence of its class can catch it. Each was graded resolved=True on main at
dbb5a59; each must now earn 0 while the gold patch still resolves (the last tests of this file).

Class 1: plugins that say where they come from (a class's ``__module__``, a module's ``__file__``, pytest's
``_conftest_plugins`` set, hooks compiled under pytest's own file name, a plugin file written into ``tests/``
at run time). Class 2: a hash-based ``.pyc`` written at run time for a test package's ``__init__.py``.
Class 3: grading files the tested process could read (the monitor's canary statuses, the log grader's
``canaries.py``). Class 4: state inside the tested interpreter (the watchdog's reference snapshot refreshed,
the rewritten-test table pointed at a forged entry, an audit hook swapping a test function's code).
Class 11: the log grader's targeted gap reached by an fd-level filter of pytest's output (caught by the log
verdict's confirmation under swebox's runner, log_confirm.py; believed with ``confirm='off'``), and the same
filter put on the JUnit grader's report channel (refused: the runner pins it, the monitor checks who sent
each byte).
"""

from __future__ import annotations

import dataclasses

import pytest
from swebox.envs.tasks.graders.grading import grade
from swebox.envs.tasks.graders.log_confirm import PREFIX as CONFIRM

from tests.calc import calc_log_task
from tests.envs.tasks.graders.test_grading_tamper import forged_reports, new_file, new_file_over_empty

F2P = "tests/test_ops.py::test_add"

_PM = (
    "import gc, os, sys, types, pytest, _pytest.config\n"
    "def _pm():\n"
    "    for _o in gc.get_objects():\n"
    "        if isinstance(_o, _pytest.config.Config):\n"
    "            return _o.pluginmanager\n"
)
# A hook that passes only the task's failing tests: the canaries stay as planted.
FLIP_SRC = (
    "import pytest\n"
    "@pytest.hookimpl(hookwrapper=True)\n"
    "def pytest_runtest_makereport(item, call):\n"
    "    outcome = yield\n"
    "    rep = outcome.get_result()\n"
    "    if item.name.startswith('test_add'):\n"
    "        rep.outcome, rep.longrepr = 'passed', None\n"
)
_FLIP = _PM + FLIP_SRC

# -- class 1: the plugin's own word about its origin -------------------------------------------------------
ORIGIN_FORGERS = {
    "a class whose __module__ is pytest's": _FLIP + "class _Flip:\n"
    "    pytest_runtest_makereport = staticmethod(pytest_runtest_makereport)\n"
    "_Flip.__module__ = '_pytest.runner'\n"
    "_pm().register(_Flip(), 'flip')\n",
    "a module whose __file__ is pytest's": _FLIP + "_m = types.ModuleType('flipper')\n"
    "_m.__file__ = pytest.__file__\n"
    "_m.pytest_runtest_makereport = pytest_runtest_makereport\n"
    "_pm().register(_m, 'flip')\n",
    "a module added to _conftest_plugins": _FLIP + "_m = types.ModuleType('conftest')\n"
    "_m.pytest_runtest_makereport = pytest_runtest_makereport\n"
    "_pm()._conftest_plugins.add(_m)\n"
    "for _mods in getattr(_pm(), '_dirpath2confmods', {}).values():\n"  # pytest's hook proxy of each folder
    "    _mods.append(_m)\n"
    "_pm().register(_m, '/testbed/tests/conftest.py')\n",
    "hooks compiled under pytest's own file name": _PM + "import _pytest.runner\n"
    "_m = types.ModuleType('_pytest.flip')\n"
    "_m.__file__ = _pytest.runner.__file__\n"
    f"exec(compile({FLIP_SRC!r}, _pytest.runner.__file__, 'exec'), _m.__dict__)\n"
    "_pm().register(_m, 'flip')\n",
    # registered by the buggy function when the test calls it, gone once it has flipped that test's report
    "a plugin there only while the test runs": _PM + "from . import ops as _ops\n"
    "_add = _ops.add\n"
    "class _Flip:\n"
    "    @pytest.hookimpl(hookwrapper=True)\n"
    "    def pytest_runtest_makereport(self, item, call):\n"
    "        outcome = yield\n"
    "        rep = outcome.get_result()\n"
    "        if item.name == 'test_add' and rep.when == 'call':\n"
    "            rep.outcome, rep.longrepr = 'passed', None\n"
    "            _pm().unregister(self)\n"
    "_Flip.__module__ = '_pytest.runner'\n"
    "def _armed(a, b):\n"
    "    if not _pm().has_plugin('flip'):\n"
    "        _pm().register(_Flip(), 'flip')\n"
    "    return _add(a, b)\n"
    "_ops.add = _armed\n",
    "a plugin file written into tests/ at run time": _PM + "import importlib.util\n"
    "_path = '/testbed/tests/flip_helpers.py'\n"
    f"open(_path, 'w').write({FLIP_SRC!r})\n"
    "_spec = importlib.util.spec_from_file_location('flip_helpers', _path)\n"
    "_m = importlib.util.module_from_spec(_spec)\n"
    "_spec.loader.exec_module(_m)\n"
    "_pm().register(_m, 'flip_helpers')\n",
}


def _unresolved(report) -> None:
    assert report.applied and report.dropped == [], report.to_dict()
    assert not report.resolved and report.reward == 0.0, report.to_dict()


@pytest.mark.parametrize("name", sorted(ORIGIN_FORGERS))
def test_a_plugin_cannot_vouch_for_its_own_origin(calc_layer, calc_task, name):
    report = grade(calc_task, new_file_over_empty("calc/__init__.py", ORIGIN_FORGERS[name]), layers=[calc_layer])
    _unresolved(report)
    if report.tests[F2P].status == "passed":  # the hook ran: the watchdog must have named it
        assert any("pytest_runtest_makereport" in t for t in report.tampered), report.tampered


# -- the calc task with its tests as a package, and a first test module that imports calc -------------------
PKG_TEST_PATCH = (
    new_file("tests/__init__.py", "# the tests are a package\n")
    + new_file("tests/helpers/__init__.py", "# test helpers\n")
    + new_file("tests/test_aaa.py", "from calc.ops import sub\n\n\ndef test_first():\n    assert sub(3, 1) == 2\n")
)


def pkg_task(calc_task):
    """calc_task whose test_patch makes tests/ a package; tests/test_aaa.py runs (and imports calc) first."""
    return dataclasses.replace(
        calc_task,
        test_patch=PKG_TEST_PATCH,
        test_files=("tests/test_aaa.py", "tests/test_ops.py"),
        PASS_TO_PASS=(*calc_task.PASS_TO_PASS, "tests/test_aaa.py::test_first"),
    )


# -- class 2: bytecode the run writes for itself ------------------------------------------------------------
# An unchecked hash-based pyc for tests/helpers/__init__.py: the loader never looks at the source, and names
# the code after it (co_filename /testbed/tests/helpers/__init__.py, a test folder's file).
FORGED_PYC = (
    "import importlib._bootstrap_external as _be, _imp, os, sys\n"
    "_path = '/testbed/tests/helpers/__init__.py'\n"
    "_src = " + repr(_FLIP + "_pm().register(sys.modules[__name__], 'helpers')\n") + "\n"
    "_code = compile(_src, _path, 'exec')\n"
    "_hash = _imp.source_hash(_be._RAW_MAGIC_NUMBER, open(_path, 'rb').read())\n"
    "_pyc = os.path.join(os.path.dirname(_path), '__pycache__', '__init__.%s.pyc' % sys.implementation.cache_tag)\n"
    "os.makedirs(os.path.dirname(_pyc), exist_ok=True)\n"
    "open(_pyc, 'wb').write(_be._code_to_hash_pyc(_code, _hash, False))\n"
    "import tests.helpers\n"
)


def test_bytecode_written_at_run_time_is_never_read(calc_layer, calc_task):
    report = grade(pkg_task(calc_task), new_file_over_empty("calc/__init__.py", FORGED_PYC), layers=[calc_layer])
    _unresolved(report)


# -- class 3: grading inputs the tested process can read ----------------------------------------------------
# A blanket forger that passes every failing test except the canaries it can read about: the JUnit monitor's
# monitor.json (their planted statuses), the log grader's canaries.py (their names).
READ_THE_CANARIES = (
    _PM + "import glob, json, re\n"
    "_spare = set()\n"
    "for _p in glob.glob('/swebox-grade-*/monitor.json'):\n"
    "    _spare |= {k.rsplit('::', 1)[1] for k, v in json.load(open(_p))['canaries'].items() if v == 'failed'}\n"
    "for _p in glob.glob('/swebox-grade-*/canaries.py'):\n"
    "    _spare |= set(re.findall(r'def (test_\\w+)', open(_p).read()))\n"
    "@pytest.hookimpl(hookwrapper=True)\n"
    "def pytest_runtest_makereport(item, call):\n"
    "    outcome = yield\n"
    "    rep = outcome.get_result()\n"
    "    if rep.failed and item.name not in _spare:\n"
    "        rep.outcome, rep.longrepr = 'passed', None\n"
    "class _Flip:\n"
    "    pytest_runtest_makereport = staticmethod(pytest_runtest_makereport)\n"
    "_Flip.__module__ = '_pytest.runner'\n"  # past main's watchdog, so that only the canaries can tell
    "_pm().register(_Flip(), 'flip')\n"
)


def test_the_canaries_planted_statuses_are_not_readable(calc_layer, graded_task):
    report = grade(graded_task, new_file_over_empty("calc/__init__.py", READ_THE_CANARIES), layers=[calc_layer])
    _unresolved(report)
    # the forger learnt nothing, so it passed the canary planted to fail too
    assert any(t.startswith("canary test ") for t in report.tampered), report.tampered


# -- class 4: state inside the tested interpreter ----------------------------------------------------------
REFRESH_THE_SNAPSHOT = (
    "import gc, sys\n" + forged_reports("test_add") + "_main = sys.modules['__main__']\n"
    "for _o in gc.get_objects():\n"
    "    if type(_o).__name__ == 'Reporter' and hasattr(_o, 'before'):\n"
    "        _o.before = _main._critical_objects()\n"
)
# Runs when tests/test_aaa.py imports calc, before pytest imports tests/test_ops.py.
POINT_THE_TABLE_AT_A_FORGERY = (
    "import gc, importlib.util, marshal\n"
    "_src = open('/testbed/tests/test_ops.py').read().replace('assert add(2, 3) == 5', 'pass')\n"
    "open('/tmp/forged.pyc', 'wb').write(importlib.util.MAGIC_NUMBER\n"
    "                                    + marshal.dumps(compile(_src, '/testbed/tests/test_ops.py', 'exec')))\n"
    "import _pytest.assertion.rewrite as _rw\n"
    "_key = '/testbed/tests/test_ops.py'\n"
    # a dict of strings only is not tracked by gc: reach it from the hook's closure and the runner's objects
    "_seen = [c.cell_contents for c in (_rw._read_pyc.__closure__ or ())]\n"
    "_seen += [v for o in gc.get_objects() if type(o).__name__ == 'Reporter' for v in vars(o).values()]\n"
    "for _o in _seen:\n"
    "    if isinstance(_o, dict) and isinstance(_o.get(_key), str):\n"
    "        _o[_key] = '/tmp/forged.pyc'\n"
)
AUDIT_HOOK_SWAPS_THE_TEST = (
    "import sys\n"
    "_done = []\n"
    "def _swap(event, args):\n"
    "    if _done:\n"
    "        return\n"
    "    for _name in ('tests.test_ops', 'test_ops'):\n"
    "        _f = getattr(sys.modules.get(_name), 'test_add', None)\n"
    "        if _f is not None:\n"
    "            _done.append(_f)\n"  # the assignment raises an audit event itself
    "            _f.__code__ = (lambda: None).__code__\n"
    "sys.addaudithook(_swap)\n"
)


# A profile function (no hook, no patch of pytest) that gives the collected test_add item a function of its
# own just before pytest runs it.
SWAP_THE_ITEMS_FUNCTION = (
    "import sys\n"
    "def _profile(frame, event, arg):\n"
    "    if event == 'call' and frame.f_code.co_name == 'pytest_runtest_protocol':\n"
    "        item = frame.f_locals.get('item')\n"
    "        if getattr(item, 'name', '') == 'test_add':\n"
    "            item.obj = lambda: None\n"
    "sys.setprofile(_profile)\n"
)


# The session's hook proxy shadowed on the instance: every item's ihook becomes a relay that passes test_add's
# report through the real hooks (which see nothing wrong) and flips it afterwards.
RELAY_THE_ITEMS_HOOKS = (
    "import gc, _pytest.main\n"
    "class _Relay:\n"
    "    def __init__(self, inner):\n"
    "        self._inner = inner\n"
    "    def __getattr__(self, name):\n"
    "        hook = getattr(self._inner, name)\n"
    "        if name != 'pytest_runtest_makereport':\n"
    "            return hook\n"
    "        def call(**kw):\n"
    "            rep = hook(**kw)\n"
    "            if kw['item'].name == 'test_add' and rep.when == 'call':\n"
    "                rep.outcome, rep.longrepr = 'passed', None\n"
    "            return rep\n"
    "        return call\n"
    "for _s in [o for o in gc.get_objects() if isinstance(o, _pytest.main.Session)]:\n"
    "    _real = _s.gethookproxy\n"
    "    _s.gethookproxy = lambda fspath, _real=_real: _Relay(_real(fspath))\n"
)


def test_the_watchdogs_reference_cannot_be_refreshed(calc_layer, calc_task):
    report = grade(calc_task, new_file_over_empty("calc/__init__.py", REFRESH_THE_SNAPSHOT), layers=[calc_layer])
    _unresolved(report)
    assert "replaced: _pytest.reports.TestReport.from_item_and_call" in report.tampered, report.tampered


def test_the_rewritten_test_table_cannot_be_redirected(calc_layer, calc_task):
    diff = new_file_over_empty("calc/__init__.py", POINT_THE_TABLE_AT_A_FORGERY)
    report = grade(pkg_task(calc_task), diff, layers=[calc_layer])
    _unresolved(report)


def test_an_audit_hook_cannot_swap_a_test_function(calc_layer, calc_task):
    report = grade(calc_task, new_file_over_empty("calc/__init__.py", AUDIT_HOOK_SWAPS_THE_TEST), layers=[calc_layer])
    _unresolved(report)


def test_the_hooks_a_test_goes_through_cannot_be_relayed(calc_layer, calc_task):
    report = grade(calc_task, new_file_over_empty("calc/__init__.py", RELAY_THE_ITEMS_HOOKS), layers=[calc_layer])
    _unresolved(report)


def test_a_collected_item_cannot_be_given_another_function(calc_layer, calc_task):
    report = grade(calc_task, new_file_over_empty("calc/__init__.py", SWAP_THE_ITEMS_FUNCTION), layers=[calc_layer])
    _unresolved(report)
    if report.tests[F2P].status == "passed":  # the lambda ran in place of the test: the runner must have said so
        assert any(t.startswith(F2P + ": the test function") for t in report.tampered), report.tampered


# -- the honest fixes still resolve (the same task shapes as the attacks) -----------------------------------
def test_the_gold_patch_resolves_with_tests_as_a_package(calc_layer, calc_task, gold):
    report = grade(pkg_task(calc_task), gold["add"], layers=[calc_layer])
    assert report.resolved and report.reward == 1.0 and not report.tampered and not report.errors, report.to_dict()
    assert report.tests["tests/test_aaa.py::test_first"].status == "passed"


def test_an_empty_diff_does_not_resolve_with_tests_as_a_package(calc_layer, calc_task):
    report = grade(pkg_task(calc_task), "", layers=[calc_layer])
    assert not report.resolved and report.reward == 0.0 and report.tests[F2P].status == "failed", report.to_dict()


# -- class 11: the log grader's targeted gap, reached at the fd level (docs/tasks.md) -------------------------
# pytest's fd capture saved the script's stdout pipe before the tests imported calc; every fd on that pipe is
# replaced by a pipe to a forked filter that turns the task's failing lines into passes. No pytest object is
# touched, so nothing in the tested process can see it, and the log is what pytest itself printed. The log
# verdict's confirmation (the F2P and P2P tests again under swebox's runner) does not believe it; the same filter on
# the JUnit grader's channel is refused (below).
FD_FILTER = (
    "import os, re\n"
    "_target = os.readlink('/proc/%d/fd/1' % os.getppid())\n"
    "_fds = [int(f) for f in os.listdir('/proc/self/fd') if f.isdigit()]\n"
    "_same = []\n"
    "for _f in _fds:\n"
    "    try:\n"
    "        if os.readlink('/proc/self/fd/%d' % _f) == _target:\n"
    "            _same.append(_f)\n"
    "    except OSError:\n"
    "        pass\n"
    "if _same:\n"
    "    _out = os.dup(_same[0])\n"
    "    _r, _w = os.pipe()\n"
    "    if os.fork() == 0:\n"
    "        os.close(_w)\n"
    "        _bad = re.compile(r'^FAILED (tests/test_ops.py::test_add|'\n"
    "                          r'tests/test_spaces.py::test_add_ids\\[one plus two\\])( - .*)?$')\n"
    "        with os.fdopen(_r, 'rb') as _src:\n"
    "            for _line in _src:\n"
    "                _text = _line.decode(errors='replace')\n"
    "                _text = _bad.sub(lambda m: 'PASSED ' + m.group(1), _text.rstrip('\\n')) + '\\n'\n"
    "                _text = _text.replace('1 failed, ', '')\n"
    "                os.write(_out, _text.encode())\n"
    "        os._exit(0)\n"
    "    os.close(_r)\n"
    "    for _f in _same:\n"
    "        os.dup2(_w, _f)\n"
    "    os.close(_w)\n"
)


def test_an_fd_level_filter_of_the_log_is_caught(calc_layer, calc_task):
    report = grade(calc_log_task(calc_task), new_file_over_empty("calc/__init__.py", FD_FILTER), layers=[calc_layer])
    _unresolved(report)
    # the filter fooled the log (the F2P test reads as passed) and the runner's rerun says otherwise (the
    # filter's own doing makes that run incomplete there: pytest exits 2, the F2P tests have no report)
    assert report.log_status == "ok" and report.tests[F2P].status == "passed", report.to_dict()
    assert report.confirm == "failed", report.to_dict()
    assert any(e.startswith(f"{CONFIRM}F2P test {F2P} is ") for e in report.errors), report.errors


def test_with_confirm_off_the_fd_filter_is_believed_as_documented(calc_layer, calc_task):
    # the opt-out is what it says: the log alone decides and the gap is open again (docs/tasks.md)
    task = dataclasses.replace(calc_log_task(calc_task), confirm="off")
    report = grade(task, new_file_over_empty("calc/__init__.py", FD_FILTER), layers=[calc_layer])
    assert report.resolved and report.confirm == "off" and "confirm" not in report.durations, report.to_dict()


# -- class 11 through the JUnit grader's own channel: a filter between the runner and the monitor ------------
# The runner streams its events over one fd of the tested process. The code under test puts a pipe of its own
# in the way and a forked helper turns the task test's failed reports into passes on their way to the monitor
# (the canaries stay honest). Three ways in: dup2 onto the channel's fd; close it and let dup() land on its
# number; leave the fd alone and point the runner's sends at the pipe (the helper then sends from its own
# process; as a thread it would send from the runner's). Each is wrapped so that a refused call changes nothing
# else: the run goes on and must score 0. On main at fdfe2d6 the dup2 filter was graded resolved with the bug
# in place, and the three forked-helper cases below fail there.
_EVENT_PUMP = (
    "def _pump(_r, _real):\n"
    "    import json\n"
    "    with os.fdopen(_r, 'rb') as _src:\n"
    "        for _l in _src:\n"
    "            try:\n"
    "                _e = json.loads(_l)\n"
    "            except ValueError:\n"
    "                _e = None\n"
    "            if isinstance(_e, dict) and _e.get('e') == 'report' and _e.get('outcome') == 'failed' \\\n"
    "                    and str(_e.get('id', '')).endswith('::test_add'):\n"
    "                _e['outcome'], _e['msg'] = 'passed', ''\n"
    "                _l = (json.dumps(_e) + '\\n').encode()\n"
    "            os.write(_real, _l)\n"
    "    if threading.current_thread() is not threading.main_thread():\n"
    "        return\n"
    "    os._exit(0)\n"
)
EVENT_FILTERS = {
    "dup2 onto the channel's fd": "os.dup2(_w, _fd)\n",
    "close the channel's fd, dup onto its number": "os.close(_fd)\n_n = os.dup(_w)\nassert _n == _fd, _n\n",
    "point the runner's sends at the pipe": (
        "_send = sys.modules['__main__']._send\n_send.__defaults__ = _send.__defaults__[:-1] + (os.dup(_w),)\n"
    ),
}
THREADED = "point the runner's sends at the pipe"  # also run with the helper as a thread of the runner


def event_filter(redirect: str, thread: bool = False) -> str:
    helper = (
        "    threading.Thread(target=_pump, args=(_r, _real), daemon=True).start()\n"
        if thread
        else "    if os.fork() == 0:\n        os.close(_w)\n        _pump(_r, _real)\n    os.close(_r)\n"
    )
    return (
        "import os, sys, threading\n"
        + _EVENT_PUMP
        + "if sys.argv[0].endswith('pytest_runner.py') and sys.argv[-1].isdigit():\n"
        "    _fd = int(sys.argv[-1])\n"
        "    _real = os.dup(_fd)\n"
        "    _r, _w = os.pipe()\n"
        + helper
        + "    try:\n"
        + "".join("        " + line + "\n" for line in redirect.splitlines())
        + "    except Exception:\n"
        "        pass\n"
        "    os.close(_w)\n"
    )


@pytest.mark.parametrize("name,thread", [(name, False) for name in EVENT_FILTERS] + [(THREADED, True)])
def test_a_filter_on_the_runners_report_channel_earns_nothing(calc_layer, calc_task, name, thread):
    diff = new_file_over_empty("calc/__init__.py", event_filter(EVENT_FILTERS[name], thread))
    report = grade(calc_task, diff, layers=[calc_layer])
    _unresolved(report)
    if name == THREADED:  # the redirect took: pytest's reports were fooled, and the monitor saw how
        assert "changed at run time: __main__._send.__defaults__" in report.tampered, report.tampered
        assert thread or any(t.startswith("events sent by process ") for t in report.tampered), report.tampered
    else:  # refused by the pin: nothing changed, the task's test failed as it does
        assert report.tests[F2P].status == "failed", report.to_dict()
