"""Where the graded run's code comes from: the runner's origin checks and its refusal of bytecode. Standalone.

Loaded by ``pytest_runner.py`` from the file beside it when the runner starts, before any project code
(standard library only; the grader writes both files into the run's folder). What is judged here is never
what a plugin or a module says about itself (``__file__``, ``__module__``, pytest's tables), all of which the
code under test can set, but what the interpreter loaded: function objects that existed when the runner
started, code objects compared with the file their ``co_filename`` names, and that file's ctime, which no
process can set back (a file written during the run is newer than ``START``).
"""

from __future__ import annotations

import hashlib
import os
import sys
import time
import types

START = time.time()  # loaded before any project code: a file or a pyc changed from here on is the run's own
REPO = "/testbed/"
_FunctionType, _MethodType, _CodeType = types.FunctionType, types.MethodType, types.CodeType


def trusted_file(path: str) -> bool:
    """Installed packages, the standard library, and the repository's test folders and conftest files (the
    grader's filter keeps every agent diff out of those and restores them: their code is the task's own).
    Where the file sits is only half of it: ``Origins`` also wants the code to be in the file, unchanged."""
    real = os.path.realpath(path)
    if real.startswith(REPO):
        parts = real[len(REPO) :].split("/")
        name = parts[-1]
        return (name == "conftest.py" or (name.startswith("test_") or name.endswith("_test.py"))
                or any(p in ("test", "tests", "testing") for p in parts[:-1]))
    return "/site-packages/" in real or real.startswith(sys.base_prefix)


def _const(value) -> bytes:
    if isinstance(value, (tuple, frozenset)):
        items = [_const(v) for v in value]
        return type(value).__name__.encode() + b"(" + b",".join(sorted(items) if isinstance(value, frozenset)
                                                                   else items) + b")"
    return type(value).__name__.encode() + b":" + repr(value).encode()


def fingerprint(code, _sha=hashlib.sha256) -> str:
    """A code object and every code nested in it, without its file name (what is compared to the file's)."""
    digest, stack = _sha(), [code]
    while stack:
        c = stack.pop()
        digest.update(repr((c.co_name, c.co_firstlineno, c.co_argcount, c.co_kwonlyargcount, c.co_flags,
                            c.co_names, c.co_varnames, c.co_freevars, c.co_cellvars)).encode())
        digest.update(c.co_code)
        for k in c.co_consts:
            if isinstance(k, _CodeType):
                stack.append(k)
            else:
                digest.update(_const(k))
    return digest.hexdigest()


class Origins:
    """Where each hook implementation comes from, judged by what pytest loaded, never by the plugin's word.

    A hook's function is trusted when it is one that existed when this runner started (pytest's, pluggy's,
    the standard library's: captured before any project code ran), or when its code object is one that the
    trusted file named by its ``co_filename`` compiles to (plain, or as pytest rewrites it) and that file was
    not written during the run (its ctime, which no process can set back, predates the runner's start). A
    plugin's ``__file__``, its class's ``__module__`` or its place in pytest's tables play no part."""

    def __init__(self) -> None:
        import _pytest.config

        for name in (*_pytest.config.default_plugins, "python_path"):  # the builtin plugins, loaded now
            try:
                __import__(f"_pytest.{name}")
            except ImportError:
                pass
        funcs: dict[int, object] = {}
        for name, module in list(sys.modules.items()):
            if not name.startswith(("_pytest", "pytest", "pluggy", "__main__", "swebox_runner_origins")):
                continue  # hooks at start-up are pytest's own; what else a plugin uses is checked by its file
            for value in list(getattr(module, "__dict__", {}).values()):
                for item in ((value, *vars(value).values()) if isinstance(value, type) else (value,)):
                    func = getattr(item, "__func__", item)  # staticmethod, classmethod
                    if isinstance(func, _FunctionType):
                        funcs[id(func)] = func  # the dict keeps them alive: an id is never reused
        self.startup = funcs
        self.files: dict[str, set[str]] = {}
        self.verdicts: dict[int, tuple[object, str]] = {}
        self.config = None

    def _file_codes(self, path: str) -> set[str]:
        found = self.files.get(path)
        if found is None:
            found = set()
            with open(path, "rb") as fh:
                source = fh.read()
            codes = [compile(source, path, "exec", dont_inherit=True)]
            try:  # conftests, pytest_plugins modules and entry-point plugins run as pytest rewrites them
                from pathlib import Path

                from _pytest.assertion.rewrite import _rewrite_test

                # config is None until pytest_configure; pytest's annotation says Config, its code reads None
                codes.append(_rewrite_test(Path(path), self.config)[1])  # type: ignore[arg-type]
            except Exception:
                pass
            while codes:
                code = codes.pop()
                found.add(fingerprint(code))
                codes += [k for k in code.co_consts if isinstance(k, _CodeType)]
            self.files[path] = found
        return found

    def why_not(self, function) -> str:
        """'' for a hook function of trusted origin, else why it is not."""
        func = function.__func__ if isinstance(function, _MethodType) else function
        if not isinstance(func, _FunctionType):
            return f"is not a Python function ({type(func).__name__})"
        if self.startup.get(id(func)) is func:
            return ""
        code = func.__code__
        known = self.verdicts.get(id(code))
        if known is not None and known[0] is code:
            return known[1]
        path, why = code.co_filename, ""
        if not trusted_file(path):
            why = f"comes from {path}, not from pytest, an installed package or the repository's tests"
        else:
            try:
                if os.stat(path).st_ctime >= START:
                    why = f"comes from {path}, written during the run"
                elif fingerprint(code) not in self._file_codes(path):
                    why = f"is not code of {path}"
            except (OSError, SyntaxError, ValueError) as exc:
                why = f"cannot be checked against {path}: {exc}"
        self.verdicts[id(code)] = (code, why)
        return why

    def problems(self, impls, hook: str) -> list[str]:
        out = []
        for impl in impls:
            why = self.why_not(getattr(impl, "function", None))
            if why:
                name = getattr(impl, "plugin_name", "?")
                try:
                    plugin = repr(getattr(impl, "plugin", None))[:80]
                except Exception:  # a plugin's own __repr__ is the project's code
                    plugin = "?"
                out.append(f"plugin registered at run time from outside pytest: {name!r} ({plugin}): "
                           f"its hook {hook} {why}")
        return out


def refuse_bytecode(start: float = START) -> None:
    """No cached bytecode for the repository, nor any written during the run: a pyc is code no check reads
    (an unchecked hash-based pyc is never compared with its source, and the loader names its code after the
    source file), so a graded run compiles the repository from source, as ``-B`` alone does not make it."""
    import _frozen_importlib_external as external

    original, stat = external.cache_from_source, os.stat

    def cache_from_source(path, debug_override=None, *, optimization=None):
        if str(path).startswith(REPO):
            raise NotImplementedError("no cached bytecode for the repository in a graded run")
        cached = original(path, debug_override, optimization=optimization)
        try:
            fresh = stat(cached).st_ctime >= start
        except OSError:
            fresh = False
        if fresh:
            raise NotImplementedError("no bytecode written during a graded run")
        return cached

    external.cache_from_source = cache_from_source  # what SourceLoader.get_code looks up on every import


def plain_tests(paths) -> dict:
    """Per test file (absolute path), the tests nothing may wrap: ``name`` for a module-level ``def`` whose
    decorators are only ``pytest.mark`` ones (a mark returns the function it marks), ``Class::name`` for one in a
    top-level class with no decorator, base or keyword, each only when nothing else in the file binds that name.
    What pytest runs under such an id is the function itself, never a layer whose ``__wrapped__`` leads to it
    (one the code under test put there while the file ran: a name rebound, or a ``pytest`` whose marks wrap).
    ``async def`` is left out: pytest-asyncio and the like wrap those as they run them. Read before any project
    code runs (the code under test may rewrite the files on disk later)."""
    import ast

    def only_marks(node) -> bool:
        for deco in node.decorator_list:
            deco, chain = deco.func if isinstance(deco, ast.Call) else deco, []
            while isinstance(deco, ast.Attribute):
                chain.append(deco.attr)
                deco = deco.value
            if not (isinstance(deco, ast.Name) and deco.id == "pytest" and len(chain) > 1 and chain[-1] == "mark"):
                return False
        return True

    out = {}
    for rel in paths:
        path = os.path.normpath(os.path.join(REPO, rel))
        try:
            with open(path, "rb") as fh:
                tree = ast.parse(fh.read(), path)
        except (OSError, SyntaxError, ValueError):
            continue
        bound: dict = {}  # how often each name is bound anywhere in the file
        for node in ast.walk(tree):
            names = [node.name] if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) else []
            names += [node.id] if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load) else []
            aliases = [a for a in getattr(node, "names", ()) if isinstance(a, ast.alias)]  # imports
            names += [(a.asname or a.name).split(".")[0] for a in aliases]
            for name in names:
                bound[name] = bound.get(name, 0) + 1
        plain = set()
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and only_marks(node) and bound.get(node.name) == 1:
                plain.add(node.name)
            elif isinstance(node, ast.ClassDef) and not (node.decorator_list or node.bases or node.keywords):
                plain.update(node.name + "::" + f.name for f in node.body
                             if isinstance(f, ast.FunctionDef) and only_marks(f) and bound.get(f.name) == 1)
        out[path] = frozenset(plain)
    return out


def layers(obj) -> list:
    """The functions a test's call goes through, from ``obj`` (under a bound method) in to the test's own
    function, which is last (or whatever the chain ends on: a callable that is no function). Each layer leads
    to the next by its ``__wrapped__`` (``functools.wraps``: ``mock.patch``, a project's own decorator) or, for
    hypothesis's ``@given``, which sets no ``__wrapped__``, by its handle's ``inner_test``: ``given`` returns a
    function of its own making (its code renamed after the test's file and line) whose ``.hypothesis`` handle
    holds the test, called once per example, and which hypothesis documents for plugins to replace. Stopping
    there would judge that function as the test (it is no code of the test file: every ``@given`` test would be
    flagged). Following it grants a layer nothing that ``__wrapped__`` does not: either link is set by whoever
    made the layer, which is why a wrapped call is watched (``watch_returns``)."""
    chain = []
    for _ in range(20):
        obj = getattr(obj, "__func__", obj)
        chain.append(obj)
        if not isinstance(obj, _FunctionType):
            break
        inner = obj.__dict__.get("__wrapped__")
        if inner is None and obj.__dict__.get("hypothesis") is not None:
            try:
                inner = getattr(obj.__dict__["hypothesis"], "inner_test", None)
            except Exception:  # a handle's own attribute lookup is the project's code
                inner = None
        if inner is None or any(inner is layer for layer in chain):  # a layer that leads back: no further in
            break
        obj = inner
    return chain


def innermost(obj):
    """The function under a bound method and its decorators' layers (``layers``): the test's own ``def``."""
    return layers(obj)[-1]


def shadowed(obj) -> list[str]:
    """Methods of ``obj``'s class that ``obj`` shadows with an attribute of its own (set at run time)."""
    cls, found = type(obj), []
    for name, value in list(getattr(obj, "__dict__", {}).items()):
        if callable(value) and not name.startswith("__") and callable(getattr(cls, name, None)):
            found.append(f"replaced on the instance: {cls.__module__}.{cls.__qualname__}.{name}")
    return found


def executing(multicall) -> list:
    """The hook implementations pluggy is running right now (its own copy of the list, which a plugin that
    unregisters itself mid-call does not leave)."""
    # executing <- Reporter._vet <- the hook method (<- pluggy's wrapper runner)
    frame: types.FrameType | None = sys._getframe(2)
    for _ in range(6):
        if frame is None:
            break
        if frame.f_code is multicall:
            impls = frame.f_locals.get("hook_impls")
            return list(impls) if impls is not None else []
        frame = frame.f_back
    return []


def watch_returns(code, *outer):
    """Watches the frames of ``code`` and of the layers' codes ``outer``, in this thread and in threads started
    from now on, for a normal return: returns ``stop``, which puts back the profile functions it found and
    returns the watched codes (``code`` first) none of whose frames returned.

    Why. A test whose file wraps it (``mock.patch``, hypothesis's ``given``, a project's own decorator) is run by
    pytest through its decorators' layers, and a layer planted around those looks just like them: following the
    chain (``layers``) reaches the test's own ``def`` whether or not anything calls it. What a planted layer cannot
    fake is that the ``def`` ran to its end: it never calls it, or calls it and swallows its failure. A frame that
    unwinds is told from one that returns by its last instruction (a return, not the raise or re-raise it left
    from), and only a frame of that code can present one. The ``def`` alone is not enough: hypothesis calls it once
    per example, and it returns on the examples the code under test gets right, so a planted layer that calls
    ``given``'s layer and swallows the failure that one raises would pass. Every layer of the chain must return too:
    a planted one calls the next, which (with the ``def`` failing) unwinds. An honest layer returns whenever the
    test passes; a test that fails (or is marked xfail) is not judged here. On Python 3.7 (the oldest the runner
    runs on) a ``return`` inside ``with`` or ``finally`` leaves through ``END_FINALLY``, as an exception does, so
    there that instruction counts as a return: an exception leaving through a ``with`` or ``finally`` is not told
    apart."""
    import dis
    import threading

    ends = {dis.opmap[n] for n in ("RETURN_VALUE", "RETURN_CONST") if n in dis.opmap}
    if "BREAK_LOOP" in dis.opmap:  # Python < 3.8, where a return may leave through END_FINALLY
        ends.add(dis.opmap["END_FINALLY"])
    watched = (code, *outer)
    raws = {id(c): (c, c.co_code) for c in watched}  # the codes are kept alive by `watched`: ids stay theirs
    returned: set = set()

    def profile(frame, event, arg, raws=raws, ends=frozenset(ends), caller=sys._getframe):
        if event == "return":
            c = frame.f_code
            found = raws.get(id(c))
            # the frame is the one the interpreter is leaving, which called this function: code under test that
            # calls it (sys.getprofile() hands it out) with an object that mimics a frame of the def is not heard
            if found is not None and found[0] is c and 0 <= frame.f_lasti < len(found[1]) and (
                    found[1][frame.f_lasti] in ends) and caller(1) is frame:
                returned.add(id(c))

    before = sys.getprofile(), getattr(threading, "_profile_hook", None)
    sys.setprofile(profile)
    threading.setprofile(profile)

    def stop() -> list:
        sys.setprofile(before[0])
        threading.setprofile(before[1])
        return [c for c in watched if id(c) not in returned]

    return stop


def lift_timing_checks(chain):
    """Lifts hypothesis's timing checks (its ``deadline`` and the ``too_slow`` health check) from the ``@given``
    layers of ``chain`` for one call: returns ``restore``, which puts their settings back.

    Why. The watch above calls a Python function on every call and return in the process: a watched test runs 4
    to 7 times slower than in the harness's run (measured, docs/tasks.md). Hypothesis times each example against
    its ``deadline`` (200 ms unless the test sets one) and fails a test whose examples run late, so an honest
    ``@given`` test whose example takes 40 ms would fail here and pass there. A slower run says nothing about
    what the code under test computes; a test that fails on a result still fails. Hypothesis reads the settings
    from the layer's ``_hypothesis_internal_use_settings`` at each call (``@settings`` writes it there) and
    builds derived settings with ``parent=`` itself; anything odd about them (code under test may have set the
    attribute) leaves them as they are."""
    hypothesis = sys.modules.get("hypothesis")
    undo = []
    for layer in chain if hypothesis is not None else ():
        old = getattr(layer, "__dict__", {}).get("_hypothesis_internal_use_settings")
        try:
            if not isinstance(old, hypothesis.settings):
                continue
            checks = list(old.suppress_health_check)
            new = hypothesis.settings(parent=old, deadline=None,
                                      suppress_health_check=checks + [hypothesis.HealthCheck.too_slow])
        except Exception:  # an old or patched hypothesis: its timing checks stay
            continue
        layer.__dict__["_hypothesis_internal_use_settings"] = new
        undo.append((layer, old))

    def restore():
        for layer, old in undo:
            layer.__dict__["_hypothesis_internal_use_settings"] = old

    return restore
