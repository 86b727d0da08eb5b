"""The tested process: pytest plus a reporting plugin that streams every test report to the grade monitor.

Usage (``grade_monitor.py`` starts it; it is never trusted with the verdict)::

    python -I -B pytest_runner.py ARGS_JSON EVENT_FD
    # ARGS_JSON: {"options": [...], "files": [...], "rewritten": {test file: cached rewritten code}}

The code under test runs in this process, so nothing here is authoritative: the plugin's job is to tell the
monitor, over the pipe ``EVENT_FD``, what pytest reports *as it happens* (one JSON line per event: start,
collected, every setup/call/teardown report, the watchdog's checks, finish). The monitor — a separate
process that holds the key this process never sees — checks that the stream is complete and consistent and
signs the verdict. Forging after the fact (rewriting files, printing lines, leaving early) therefore no
longer works; forging *before* a test runs is what the watchdog looks for, and the monitor's canary tests
catch a forger that does not single out the task's own tests.

The watchdog captures pytest's, pluggy's and unittest's critical functions (and their code objects) when
this program starts, before any project code is imported, and reports every one replaced, and every plugin
whose origin is not pytest, an installed package, a ``conftest.py`` pytest imported itself or the
repository's test folders (``pytest_plugins`` modules).
"""

from __future__ import annotations

import json
import os
import sys

import pytest  # before any project code: the reporter captures the originals

_write, _dumps = os.write, json.dumps  # captured before the project can replace them


def _critical_objects() -> dict[str, object]:
    """name -> the object pytest, pluggy and unittest grade with (and the code of each function), right now."""
    import unittest

    import _pytest.junitxml as junitxml
    import _pytest.main as main
    import _pytest.outcomes as outcomes
    import _pytest.python as python
    import _pytest.reports as reports
    import _pytest.runner as runner
    import _pytest.skipping as skipping
    import _pytest.unittest as pt_unittest
    import pluggy._callers as callers
    import pluggy._hooks as hooks

    found: dict[str, object] = {}
    this = sys.modules[__name__]  # this runner too: its functions and its plugin's methods
    for mod in (runner, python, main, junitxml, outcomes, callers, skipping, pytest, this):
        for name, value in vars(mod).items():
            if callable(value) and not name.startswith("__"):
                found[f"{mod.__name__}.{name}"] = value
    for cls in (
        reports.TestReport,
        reports.BaseReport,
        reports.CollectReport,
        runner.CallInfo,
        python.Function,
        pt_unittest.TestCaseFunction,
        junitxml.LogXML,
        junitxml._NodeReporter,
        getattr(hooks, "HookCaller", None) or hooks._HookCaller,  # pluggy < 1.1 (pinned by older recipes)
        hooks.HookImpl,
        unittest.TestCase,
        unittest.TestResult,
        this.Reporter,
    ):
        for name, value in vars(cls).items():
            found[f"{cls.__module__}.{cls.__qualname__}.{name}"] = value
    for name, value in list(found.items()):
        func = getattr(value, "__func__", value)
        code = getattr(func, "__code__", None)
        if code is not None:
            found[name + ".__code__"] = code
    return found


def _trusted_file(path: str) -> bool:
    """Installed packages, the standard library, and the repository's test folders (the grader's filter keeps
    every agent diff out of those: a ``pytest_plugins`` module in ``tests/`` is the project's own). A file
    named ``conftest.py`` is not trusted by its name: only the conftest modules pytest imported itself are."""
    real = os.path.realpath(path)
    if real.startswith("/testbed/"):
        return any(p in ("test", "tests", "testing") for p in real[len("/testbed/") :].split("/")[:-1])
    return "/site-packages/" in real or real.startswith(sys.base_prefix)


def _use_rewritten(table: dict[str, str]) -> None:
    """pytest takes a task test file's rewritten code from the grader's cache (``rewrite_cache``: a read-only
    folder, entries compiled from the pristine test files) instead of looking in ``__pycache__`` beside it.

    ``table`` maps a test file's path to its entry; the Reporter fills it at ``pytest_configure`` (empty until
    then, and for good when the ini enables ``enable_assertion_pass_hook``, which the entries are not compiled
    with). A file not in it, or an entry that does not load, is pytest's own business as before."""
    import importlib.util
    import marshal
    import types

    from _pytest.assertion import rewrite

    original = getattr(rewrite, "_read_pyc", None)
    if original is None:
        return
    magic = importlib.util.MAGIC_NUMBER

    def _read_pyc(source, pyc, trace=lambda message: None):
        entry = table.get(str(source))
        if entry is not None:
            try:
                with open(entry, "rb") as fh:
                    data = fh.read()
                code = marshal.loads(data[len(magic) :]) if data[: len(magic)] == magic else None
            except (OSError, ValueError, EOFError, TypeError):
                code = None
            if isinstance(code, types.CodeType):
                trace(f"cached rewritten code for {source} from {entry}")
                return code
        return original(source, pyc, trace)

    rewrite._read_pyc = _read_pyc


def _send(reporter: Reporter, event: dict, _write=_write, _dumps=_dumps) -> None:
    data = (_dumps(event, default=str) + "\n").encode()
    while data:
        data = data[_write(reporter.fd, data) :]


def _allowed_plugin(reporter: Reporter, plugin, _trusted_file=_trusted_file) -> bool:
    if plugin is reporter or plugin is None:  # None: a blocked name (-p no:X), which older pluggy lists too
        return True
    pm = reporter.config.pluginmanager
    if plugin in getattr(pm, "_conftest_plugins", ()):
        return True  # a conftest.py pytest imported itself (the filter kept the diff from adding any)
    # a module, a class (pytest registers some classes themselves) or an instance
    module = plugin.__module__ if isinstance(plugin, type) else type(plugin).__module__
    file = getattr(plugin, "__file__", None) or getattr(sys.modules.get(module), "__file__", "")
    # pytest's own modules and per-session objects, installed plugins, `pytest_plugins` modules of the tests
    return bool(file) and _trusted_file(file)


def _check(reporter: Reporter, _critical_objects=_critical_objects, _allowed_plugin=_allowed_plugin) -> list[str]:
    after = _critical_objects()
    problems = [f"replaced: {name}" for name, value in reporter.before.items() if after.get(name) is not value]
    problems += [f"added: {name}" for name in after if name not in reporter.before and ".TestCase." in name]
    if reporter.config is not None:
        pm = reporter.config.pluginmanager
        if pm._inner_hookexec is not reporter.hookexec:
            problems.append("replaced: the plugin manager's hook executor")
        for plugin in pm.get_plugins():
            if not _allowed_plugin(reporter, plugin):
                name = pm.get_name(plugin)
                problems.append(f"plugin registered at run time from outside pytest: {name!r} ({plugin!r:.80})")
    return problems


class Reporter:
    """The plugin: streams events to the monitor and checks that pytest itself was left alone.

    Its hooks reach ``_send`` and ``_check`` through default arguments bound when this file was loaded (pluggy
    passes no value for them), so replacing them, or this class's methods, in the module does not switch
    the checks off: the snapshot holds both, and the original check reports the replacement.
    """

    def __init__(self, fd: int, rewritten: dict[str, str] | None = None) -> None:
        self.fd = fd
        self.config = None
        self.hookexec = None
        self.rewritten: dict[str, str] = {}  # what _use_rewritten reads, filled once the ini is known
        self.cached = dict(rewritten or {})
        self.before = _critical_objects()

    def pytest_configure(self, config, _send=_send) -> None:
        self.config = config
        self.hookexec = config.pluginmanager._inner_hookexec
        try:
            pass_hook = bool(config.getini("enable_assertion_pass_hook"))
        except ValueError:  # a pytest without that option
            pass_hook = False
        if not pass_hook:
            self.rewritten.update(self.cached)
        _send(self, {"e": "start"})

    @pytest.hookimpl(hookwrapper=True, tryfirst=True)
    def pytest_collection_modifyitems(self, session, config, items, _send=_send):
        yield
        # Outermost wrapper: the final selection, after every plugin and conftest had its say.
        _send(self, {"e": "collected", "ids": [item.nodeid for item in items]})

    def pytest_collection_finish(self, session, _send=_send, _check=_check) -> None:
        # Collection imported the project: a patch made at import and undone before the end shows here.
        _send(self, {"e": "check", "problems": _check(self)})

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(self, report, _send=_send) -> None:
        message = ""
        if report.failed or report.skipped:
            crash = getattr(report.longrepr, "reprcrash", None)
            if crash is not None:
                message = crash.message
            elif isinstance(report.longrepr, tuple) and len(report.longrepr) == 3:
                message = str(report.longrepr[2])  # a skip: (file, line, reason)
            else:
                message = str(report.longrepr or "")
        _send(
            self,
            {
                "e": "report",
                "id": report.nodeid,
                "when": report.when,
                "outcome": report.outcome,
                "xfail": hasattr(report, "wasxfail"),
                "dur": float(getattr(report, "duration", 0.0) or 0.0),
                "msg": message.strip()[:500],
            },
        )


def main(argv: list[str]) -> None:
    args_file, fd = argv[1], int(argv[2])
    with open(args_file, encoding="utf-8") as fh:
        spec = json.load(fh)
    # A missing file would make pytest run nothing at all; run the rest and report it instead.
    missing = [f for f in spec["files"] if not os.path.exists(f)]
    present = [f for f in spec["files"] if f not in missing]
    reporter, send, check = Reporter(fd, spec.get("rewritten")), _send, _check
    if reporter.cached:
        _use_rewritten(reporter.rewritten)
    code: object = None
    try:
        code = int(pytest.main(spec["options"] + (present or spec["files"]), plugins=[reporter]))
    except BaseException as exc:  # SystemExit or worse from the project's code
        code = f"{type(exc).__name__}: {exc}"[:300]
    send(reporter, {"e": "check", "problems": check(reporter)})
    send(reporter, {"e": "finish", "exit": code, "missing_files": missing})
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # the project may have closed or replaced them
            pass
    os._exit(0)  # no atexit handler of the project runs after the finish event


if __name__ == "__main__":
    main(sys.argv)
