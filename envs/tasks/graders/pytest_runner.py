"""The tested process: pytest plus a reporting plugin that streams every test report to the grade monitor.

Usage (``grade_monitor.py`` starts it; it is never trusted with the verdict)::

    python -I -B pytest_runner.py ARGS_JSON EVENT_FD
    # ARGS_JSON: {"options": [...], "files": [...], "rewritten": {test file: cached rewritten code},
    #             "plain": {test file: its tests nothing may wrap}}

The code under test runs in this process, so nothing here is authoritative: the plugin's job is to tell the
monitor, over the pipe ``EVENT_FD``, what pytest reports *as it happens* (one JSON line per event: start,
collected, every setup/call/teardown report, the watchdog's checks, finish). The monitor — a separate
process that holds the key this process never sees — checks that the stream is complete and consistent and
signs the verdict. Forging after the fact (rewriting files, printing lines, leaving early) therefore no
longer works; forging *before* a test runs is what the watchdog looks for, and the monitor's canary tests
catch a forger that does not single out the task's own tests.

Before any project code runs, the runner pins ``EVENT_FD`` (``runner_pin.pin``: a seccomp filter refuses to
repoint or close it, so no filter can sit between this process and the monitor), deletes its arguments file,
refuses cached bytecode for the repository and any pyc written during the run
(``runner_origins.refuse_bytecode``), sends the monitor a snapshot of pytest's, pluggy's and unittest's
critical functions (and their code objects) that every later check is compared with *there*, and installs an
audit hook that lets no later audit hook in and reports a changed function code or class method the moment it
happens. Every hook implementation is judged by what the interpreter loaded, never by what its plugin says
(``runner_origins.Origins``), after collection, at the end, and for the implementations pluggy runs on each
test's path; every task test file pytest loads is reported with the cached rewrite it was served, which the
monitor checks against its own table.
"""

from __future__ import annotations

import json
import os
import sys
import types

import pytest

_write, _dumps = os.write, json.dumps  # captured before the project can replace them
_FunctionType, _CodeType = types.FunctionType, types.CodeType
_OPTIMIZED = 1  # inspect.CO_OPTIMIZED: set on a function's code, not on a module's or a class body's


def _classes() -> tuple[type, ...]:
    """The classes whose attributes the verdict is made with (their methods, and the methods' code)."""
    import _frozen_importlib_external as external
    import unittest

    import _pytest.junitxml as junitxml
    import _pytest.python as python
    import _pytest.reports as reports
    import _pytest.runner as runner
    import _pytest.unittest as pt_unittest
    import pluggy
    import pluggy._hooks as hooks

    return (
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
        pluggy.PluginManager,
        unittest.TestCase,
        unittest.TestResult,
        external.SourceLoader,
        external.SourceFileLoader,
        sys.modules[__name__].Reporter,
        origins.Origins,
    )


def _critical_objects() -> dict[str, object]:
    """name -> the object pytest, pluggy and unittest grade with (and the code of each function), right now."""
    import _frozen_importlib_external as external

    import _pytest.assertion.rewrite as rewrite
    import _pytest.junitxml as junitxml
    import _pytest.main as main
    import _pytest.outcomes as outcomes
    import _pytest.python as python
    import _pytest.runner as runner
    import _pytest.skipping as skipping
    import pluggy._callers as callers

    found: dict[str, object] = {}
    this = sys.modules[__name__]  # this runner too: its functions and its plugin's methods
    for mod in (runner, python, main, junitxml, outcomes, callers, skipping, pytest, this, rewrite, external, origins):
        for name, value in vars(mod).items():
            if callable(value) and not name.startswith("__"):
                found[f"{mod.__name__}.{name}"] = value
    for cls in _classes():
        for name, value in vars(cls).items():
            found[f"{cls.__module__}.{cls.__qualname__}.{name}"] = value
    for name, value in list(found.items()):
        func = getattr(value, "__func__", value)
        code = getattr(func, "__code__", None)
        if code is not None:
            found[name + ".__code__"] = code
    return found


def _load_beside(name: str):
    """``NAME.py`` from beside this file (the run's folder in the sandbox, the package on the host)."""
    import importlib.util

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"swebox_{name}", path)
    assert spec is not None and spec.loader is not None  # a path ending in .py always has a source loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


origins = _load_beside("runner_origins")
START, REPO, _trusted_file, fingerprint = origins.START, origins.REPO, origins.trusted_file, origins.fingerprint
_innermost, _layers, _shadowed, _executing = origins.innermost, origins.layers, origins.shadowed, origins.executing
_watch_returns, _lift_timing_checks = origins.watch_returns, origins.lift_timing_checks
_RELAY_INNER = ("_hook_relay", "_PathAwareHookProxy__hook_caller")


def _use_rewritten(table: dict[str, str], send) -> tuple[list[bool], dict[int, object], dict[str, dict]]:
    """pytest takes a task test file's rewritten code from the grader's cache (``rewrite_cache``: a read-only
    folder, entries compiled from the pristine test files) and never reads a pyc from disk (one written during
    the run would be read: pytest checks only its mtime and size).

    Every load of a repository file is reported (file, entry): the monitor holds the true table and says
    when a file was served another entry or none. Returns the switch that ``pytest_configure`` turns on
    (off for good when the ini enables ``enable_assertion_pass_hook``, which the entries are not compiled
    with), every code object of the entries served (id -> code: what a test function's code must be), and per
    file served, each qualified name (``Class.name``) to the ids of its code objects of that name (what a
    test's own ``def`` is)."""
    import importlib.util
    import marshal

    from _pytest.assertion import rewrite

    active, served, defs = [False], dict[int, object](), dict[str, dict]()
    if getattr(rewrite, "_read_pyc", None) is None:
        return active, served, defs
    magic, table = importlib.util.MAGIC_NUMBER, dict(table)

    def _read_pyc(source, pyc, trace=lambda message: None):
        path, code = str(source), None
        entry = table.get(path) if active[0] else None
        if entry is not None:
            try:
                with open(entry, "rb") as fh:
                    data = fh.read()
                code = marshal.loads(data[len(magic) :]) if data[: len(magic)] == magic else None
            except (OSError, ValueError, EOFError, TypeError):
                code = None
            if isinstance(code, _CodeType):
                trace(f"cached rewritten code for {source} from {entry}")
                stack, names = [(code, "")], defs.setdefault(path, {})
                while stack:  # the test functions this module defines: their code is one of these objects
                    c, qualname = stack.pop()
                    served[id(c)] = c
                    names.setdefault(qualname, set()).add(id(c))
                    # a class body's code is not optimized; a function's names its children <locals>
                    within = qualname + (".<locals>." if c.co_flags & _OPTIMIZED else ".") if qualname else ""
                    stack += [(k, within + k.co_name) for k in c.co_consts if isinstance(k, _CodeType)]
            else:
                code = None
        if path.startswith(REPO):
            send({"e": "rewrite", "file": path, "entry": entry if code is not None else ""})
        return code

    rewrite._read_pyc = _read_pyc
    return active, served, defs


def _send(reporter: Reporter, event: dict, _write=_write, _dumps=_dumps, _fd=-1) -> None:
    # the channel's fd is bound as a default by main() before any project code runs (not read from the
    # reporter, whose attributes anything can set): changing a default is reported by the audit hook
    data = (_dumps(event, default=str) + "\n").encode()
    while data:
        data = data[_write(_fd, data) :]


def _watch(reporter: Reporter, send=_send) -> None:
    """An audit hook, installed before any project code: no later audit hook is let in (one could rewrite a
    test after it was imported), and a changed ``__code__``/``__defaults__`` of pytest's or a test's
    function, or a method set on a class the verdict is made with, is reported the moment it happens (a
    patch undone before the next check would otherwise go unseen)."""
    if not hasattr(sys, "addaudithook"):  # Python < 3.8
        return
    startup, classes = reporter.origins.startup, {id(cls): cls for cls in _classes()}
    attributes = ("__code__", "__defaults__", "__kwdefaults__")

    def audit(event, args):
        if event == "object.__setattr__":
            obj, name = args[0], args[1]
            if isinstance(obj, _FunctionType) and name in attributes:
                where = obj.__code__.co_filename
                if startup.get(id(obj)) is obj or (where.startswith(REPO) and _trusted_file(where)):
                    send(reporter, {"e": "check", "problems": [
                        f"changed at run time: {obj.__module__}.{obj.__qualname__}.{name}"]})
            elif classes.get(id(obj)) is obj and any(callable(v) or hasattr(v, "__func__")
                                                     for v in (args[2], vars(obj).get(name))):
                problem = f"set at run time: {obj.__module__}.{obj.__qualname__}.{name}"
                send(reporter, {"e": "check", "problems": [problem]})
        elif event == "sys.addaudithook":
            raise RuntimeError("no audit hook after the grading runner's")

    sys.addaudithook(audit)


def _check(reporter: Reporter, _critical_objects=_critical_objects, _executing=_executing) -> dict:
    """The event the monitor compares with the start-up snapshot it was sent: ids of the critical objects
    now, and what the in-process checks found (hooks of untrusted origin, a replaced hook executor)."""
    problems: list[str] = []
    if reporter.config is not None:
        pm = reporter.config.pluginmanager
        if pm._inner_hookexec is not reporter.hookexec:
            problems.append("replaced: the plugin manager's hook executor")
        for hook, caller in list(vars(pm.hook).items()):
            if type(caller) is not reporter.caller_type:
                problems.append(f"replaced: the hook caller of {hook}")
                continue
            execute = getattr(caller, "_hookexec", None)
            if getattr(execute, "__self__", pm) is not pm or getattr(execute, "__func__", None) not in (
                    None, reporter.pm_hookexec):
                problems.append(f"replaced: the hook executor of {hook}")
            problems += reporter.origins.problems(caller.get_hookimpls(), hook)
    objects = {name: id(value) for name, value in _critical_objects().items()}
    return {"e": "check", "problems": problems, "objects": objects}


class Reporter:
    """The plugin: streams events to the monitor and checks that pytest itself was left alone.

    Its hooks reach ``_send`` and ``_check`` through default arguments bound when this file was loaded (pluggy
    passes no value for them); changing those defaults or the functions' code is reported by the audit hook
    as it happens, and the start-up snapshot the checks are compared with is in the monitor, not here.
    """

    def __init__(self, fd: int, rewritten: dict[str, str] | None = None) -> None:
        import pluggy

        self.fd = fd
        self.config = None
        self.hookexec = None
        self.cached = dict(rewritten or {})
        self.caller_type = getattr(pluggy, "HookCaller", None) or pluggy._hooks._HookCaller
        self.relay_type = getattr(pluggy, "HookRelay", None) or pluggy._hooks._HookRelay
        try:
            from _pytest.config.compat import PathAwareHookProxy
        except ImportError:  # pytest < 7: config.hook is the relay
            PathAwareHookProxy = self.relay_type
        self.proxy_types = (self.relay_type, PathAwareHookProxy)
        self.relay_seen: dict = {}
        self.pm_hookexec = getattr(pluggy.PluginManager, "_hookexec", None)
        self.multicall = getattr(pluggy.PluginManager("swebox")._inner_hookexec, "__code__", None)
        self.origins = origins.Origins()
        self.before = _critical_objects()  # kept alive: the ids the monitor holds stay theirs
        self.rewrite_on: list[bool] = [False]
        self.served: dict[int, object] = {}
        self.defs: dict[str, dict] = {}  # file -> qualified name -> ids of the served code objects
        self.plain: dict[str, frozenset] = {}  # file -> the tests nothing may wrap (runner_origins.plain_tests)

    def pytest_configure(self, config, _send=_send) -> None:
        self.config = self.origins.config = config
        self.hookexec = config.pluginmanager._inner_hookexec
        try:
            pass_hook = bool(config.getini("enable_assertion_pass_hook"))
        except ValueError:  # a pytest without that option
            pass_hook = False
        self.rewrite_on[0] = bool(self.cached) and not pass_hook and config.getoption("assertmode") == "rewrite"
        _send(self, {"e": "start", "rewrite": self.rewrite_on[0]})

    @pytest.hookimpl(hookwrapper=True, tryfirst=True)
    def pytest_collection_modifyitems(self, session, config, items, _send=_send):
        yield
        # Outermost wrapper: the final selection, after every plugin and conftest had its say.
        _send(self, {"e": "collected", "ids": [item.nodeid for item in items]})

    def pytest_collection_finish(self, session, _send=_send, _check=_check) -> None:
        # Collection imported the project: a patch made at import and undone before the end shows here.
        _send(self, _check(self))

    def _vet(self, hook: str, item=None, call=None, _send=_send, _executing=_executing, _shadowed=_shadowed,
             _RELAY_INNER=_RELAY_INNER) -> None:
        problems = self.origins.problems(_executing(self.multicall), hook)
        if item is not None and self.config is not None:
            # How the item reaches its hooks: no method shadowed on the item, its session, the config or the
            # plugin manager (e.g. a session.gethookproxy that relays the hooks and edits what they return),
            # and the config's hook relay is the plugin manager's own.
            pm = self.config.pluginmanager
            problems += _shadowed(item)
            if hook != "pytest_runtest_makereport" or getattr(call, "when", "call") == "call":
                for obj in (getattr(item, "session", None), self.config, pm):  # at the start and the call's report
                    problems += _shadowed(obj)
            relay = self.config.hook  # pytest's PathAwareHookProxy over pm.hook (the relay itself before 7)
            # the proxy's own reference to pm.hook: `_hook_relay` in pytest 8, name-mangled `__hook_caller` in 7
            inner = {n: v for n, v in (vars(relay).items() if relay is not pm.hook else ()) if n in _RELAY_INNER}
            if (type(pm.hook) is not self.relay_type or type(relay) not in self.proxy_types
                    or any(v is not pm.hook for v in inner.values())):
                problems.append("replaced: the hook relay")
            elif relay is not pm.hook and vars(relay) != self.relay_seen:
                # the proxy keeps what it hands out: the callers, or pytest's path wrappers (checked when it grew)
                self.relay_seen = dict(vars(relay))
                for name, value in list(self.relay_seen.items()):
                    caller = getattr(pm.hook, name, None)
                    if name not in _RELAY_INNER and value is not caller and (
                            getattr(value, "__wrapped__", None) is not caller or self.origins.why_not(value)):
                        problems.append(f"replaced: the hook relay's {name}")
            if pm._inner_hookexec is not self.hookexec:
                problems.append("replaced: the plugin manager's hook executor")
        if problems:
            _send(self, {"e": "check", "problems": problems})

    # The hooks a test's outcome goes through: the implementations each call runs are vetted as it starts.
    @pytest.hookimpl(hookwrapper=True, tryfirst=True)
    def pytest_runtest_protocol(self, item, nextitem):
        self._vet("pytest_runtest_protocol", item)
        yield

    @pytest.hookimpl(hookwrapper=True, tryfirst=True)
    def pytest_runtest_call(self, item, _send=_send):
        self._vet("pytest_runtest_call")
        # the item runs what its class says: no runtest of its own, no class the project made up
        why = "has a runtest of its own" if "runtest" in vars(item) else self.origins.why_not(type(item).runtest)
        if why:
            _send(self, {"e": "check", "problems": [f"{item.nodeid}: the test item's runtest {why}"]})
        yield

    @pytest.hookimpl(hookwrapper=True, tryfirst=True)
    def pytest_pyfunc_call(
        self, pyfuncitem, _send=_send, _innermost=_innermost, _layers=_layers, _watch_returns=_watch_returns,
        _lift_timing_checks=_lift_timing_checks,
    ):
        self._vet("pytest_pyfunc_call")
        # The function about to run is the one the test's module or class defines under the test's name, and
        # its code is the test file's own (from the cached rewrite pytest was served, or checked against the
        # file): an item whose function was swapped after collection runs nothing of the test's.
        obj = pyfuncitem.obj
        chain = _layers(obj)  # what pytest calls, its decorators' layers (runner_origins.layers), the test's def
        func = chain[-1]
        holder = getattr(getattr(pyfuncitem, "parent", None), "obj", None)
        declared = _innermost(getattr(holder, getattr(pyfuncitem, "originalname", ""), None))
        code = getattr(func, "__code__", None)
        # The test's name and file come from its node id (what the verdict is about), not from the item.
        file, _, within = pyfuncitem.nodeid.split("[", 1)[0].partition("::")
        if declared is not None and declared is not func:
            why = "is not the function its test file defines under that name"
        elif within in self.plain.get(REPO + file, ()) and getattr(obj, "__func__", obj) is not func:
            # a layer that follows __wrapped__ to the right def need not call it: none is due where nothing wraps
            why = "is wrapped, but its test file defines it with no decorator other than pytest marks"
        elif code is not None and self.served.get(id(code)) is code:
            why = self._not_its_def(file, within, func, code)
        elif within in self.plain.get(REPO + file, ()) and not (
            code is not None
            and code.co_name == within.rpartition("::")[2]
            and os.path.realpath(code.co_filename) == os.path.realpath(REPO + file)
        ):  # no served code to compare (no cache): a plainly defined test's code bears its own name and file
            why = f"runs {getattr(code, 'co_name', func)!r} of {getattr(code, 'co_filename', '?')}, not its own def"
        else:
            why = self.origins.why_not(func)
        if why:
            _send(self, {"e": "check", "problems": [f"{pyfuncitem.nodeid}: the test function {why}"]})
        # Wrapped by its file's decorators: the call may pass only if the test's own def ran to its end, and so
        # did every layer on the way (runner_origins.watch_returns says why both).
        stop = restore = None
        if code is not None and not why and len(chain) > 1:
            restore = _lift_timing_checks(chain)  # the watch slows the call: hypothesis's clock would fail it
            stop = _watch_returns(code, *[layer.__code__ for layer in chain[:-1]])
        outcome = yield
        missed = stop() if stop is not None else []
        if restore is not None:
            restore()
        if missed and getattr(outcome, "excinfo", None) is None:
            late = missed[0]
            why = (f"is wrapped, and its own def (line {code.co_firstlineno}) did not run to its end" if late is code
                   else f"is wrapped, and its layer {late.co_name} (line {late.co_firstlineno} of "
                   f"{late.co_filename}) did not return")
            _send(self, {"e": "check", "problems": [f"{pyfuncitem.nodeid}: the test function {why}"]})

    def _not_its_def(self, file: str, within: str, func, code, _innermost=_innermost) -> str:
        """Why served test code is not one its file defines under the test's name ('' when it is): the def in the
        test's own class when the file has one there (``within``: the node id's ``Class::name``), else any def
        of that name (an inherited test). The module's binding is no witness: code under test can rebind a name
        of the test file to another function of it while the file runs (through ``builtins.__build_class__``, a
        placeholder's ``__del__``, ...), before pytest collects it, so the module agrees with the item."""
        defs, name = self.defs.get(REPO + file, {}), within.rpartition("::")[2]
        own = defs.get(within.replace("::", ".")) or {
            i for qualname, ids in defs.items() if qualname.rpartition(".")[2] == name for i in ids
        }
        if not own or id(code) in own:
            return ""  # a file with no def of that name (an alias, a generated test) is left to the checks above
        for cell in getattr(func, "__closure__", None) or ():  # a wrapper of the file's own making, no wraps()
            try:
                inner = _innermost(cell.cell_contents)
            except ValueError:  # an empty cell
                continue
            if id(getattr(inner, "__code__", None)) in own:
                return ""
        return f"runs {code.co_name} (line {code.co_firstlineno}), not the {name} its test file defines"

    @pytest.hookimpl(hookwrapper=True, tryfirst=True)
    def pytest_runtest_makereport(self, item, call):
        self._vet("pytest_runtest_makereport", item, call)
        yield

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(self, report, _send=_send) -> None:
        self._vet("pytest_runtest_logreport")
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
    unpinned = _load_beside("runner_pin").pin(fd)  # first: the channel's fd stays the monitor's from here on
    _send.__defaults__ = (_write, _dumps, fd)
    with open(args_file, encoding="utf-8") as fh:
        spec = json.load(fh)
    os.unlink(args_file)  # read once: nothing of the run's set-up stays for the tests to read
    origins.refuse_bytecode()
    # A missing file would make pytest run nothing at all; run the rest and report it instead.
    missing = [f for f in spec["files"] if not os.path.exists(f)]
    present = [f for f in spec["files"] if f not in missing]
    held: list[Reporter] = []
    active, served, defs = _use_rewritten(spec.get("rewritten") or {}, lambda event: _send(held[0], event))
    reporter, send, check = Reporter(fd, spec.get("rewritten")), _send, _check  # the snapshot: after the patches
    held.append(reporter)
    reporter.rewrite_on, reporter.served, reporter.defs = active, served, defs
    # before any project code: it may rewrite the files later; the grader's tables (rewrite_cache) are
    # computed from the same pristine bytes once per task, and only the files without one are parsed here
    given = {os.path.normpath(path): frozenset(names) for path, names in (spec.get("plain") or {}).items()}
    rest = [f for f in present if os.path.normpath(os.path.join(REPO, f)) not in given]
    reporter.plain = {**origins.plain_tests(rest), **given}
    send(reporter, {"e": "pinned", "why": unpinned})  # '' when pinned; the monitor refuses a run that is not
    # The snapshot goes to the monitor before any project code runs: no later refresh in here counts.
    send(reporter, {"e": "baseline", "objects": {name: id(value) for name, value in reporter.before.items()}})
    _watch(reporter)
    code: object = None
    try:
        code = int(pytest.main(spec["options"] + (present or spec["files"]), plugins=[reporter]))
    except BaseException as exc:  # SystemExit or worse from the project's code
        code = f"{type(exc).__name__}: {exc}"[:300]
    send(reporter, check(reporter))
    send(reporter, {"e": "finish", "exit": code, "missing_files": missing})
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # the project may have closed or replaced them
            pass
    os._exit(0)  # no atexit handler of the project runs after the finish event


if __name__ == "__main__":
    main(sys.argv)
