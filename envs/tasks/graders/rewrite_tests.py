"""Rewrite the grading run's pristine test files with pytest's assertion rewriter, without running anything.

Usage (the grader writes it into the run's folder and starts it before the tests, when no code of the agent's
diff has run in the sandbox yet)::

    python -I -S -B rewrite_tests.py SPEC_JSON
    # {"files": {"/testbed/t.py": "<entry name>"}, "out": DIR, "plain": "<suffix>" or absent}

``-S``: no ``.pth`` file runs and no ``sitecustomize`` is imported (an editable install's ``.pth`` would put
``/testbed`` on ``sys.path``); the interpreter's own site-packages folders are added by hand, after the
standard library, so every import resolves to the standard library or installed packages and nothing of the
repository is importable. The test files are only parsed and compiled (``ast.parse`` + ``compile`` inside
pytest's ``_rewrite_test``), never executed. Each file is compiled only if its bytes still have the name the
grader gave it (``entry_name``, computed by the host from the bytes it read), and the code object is written
to ``OUT/<name>`` as the interpreter's magic number plus ``marshal.dumps(code)``. With ``plain`` in the spec,
the file's tests that nothing may wrap (``runner_origins.plain_tests``, loaded from ``runner_origins.py`` beside
this file: the runner's own function, run by the task's own interpreter) go to ``OUT/<name><plain>`` as a JSON
list, so the runner need not parse every test file again in every grade. Standalone: the standard library and
pytest only.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import marshal
import os
import site
import sys
from pathlib import Path

TAG = b"swebox-rewritten-test-1"
"""Changes whenever the entry format or what an entry depends on changes (old entries are then never read)."""


def entry_name(path: str, source: bytes) -> str:
    """The cache entry of the test file at ``path`` with these bytes: SHA-256 over the tag, path and bytes."""
    return hashlib.sha256(TAG + b"\0" + path.encode() + b"\0" + source).hexdigest()


def _add_site_packages() -> None:
    """The folders ``site`` would add (a venv's own, then the base's if its pyvenv.cfg includes them), without
    running ``site``: under ``-S`` a venv's ``sys.prefix`` is the base interpreter's."""
    venv = os.path.dirname(os.path.dirname(sys.executable))  # /venv/bin/python -> /venv
    folders, include_base = [], True
    cfg = os.path.join(venv, "pyvenv.cfg")
    if os.path.isfile(cfg):
        with open(cfg, encoding="utf-8", errors="replace") as fh:
            lines = [line.partition("=") for line in fh]
        settings = {k.strip().lower(): v.strip().lower() for k, _, v in lines}
        include_base = settings.get("include-system-site-packages") == "true"
        version = f"python{sys.version_info[0]}.{sys.version_info[1]}"
        folders += [os.path.join(venv, lib, version, "site-packages") for lib in ("lib", "lib64")]
    if include_base:
        folders += site.getsitepackages([sys.prefix])
    for folder in folders:
        if os.path.isdir(folder) and folder not in sys.path:
            sys.path.append(folder)


def _plain_tables(spec: dict) -> None:
    """``OUT/<name><plain>`` for each file whose bytes still have its name: ``plain_tests`` of that file."""
    suffix = spec.get("plain")
    if not suffix:
        return
    where = os.path.join(os.path.dirname(os.path.abspath(__file__)), "runner_origins.py")
    loaded = importlib.util.spec_from_file_location("swebox_runner_origins", where)
    assert loaded is not None and loaded.loader is not None  # a path ending in .py always has a source loader
    origins = importlib.util.module_from_spec(loaded)
    loaded.loader.exec_module(origins)
    for path, name in spec["files"].items():
        if entry_name(path, Path(path).read_bytes()) != name:
            continue
        # keyed by the normalised path; none for a file it cannot parse (the runner parses that one itself)
        found = origins.plain_tests([path]).get(os.path.normpath(path))
        if found is not None:
            with open(os.path.join(spec["out"], name + suffix), "w", encoding="utf-8") as fh:
                json.dump(sorted(found), fh)


def main(argv: list[str]) -> int:
    with open(argv[1], encoding="utf-8") as fh:
        spec = json.load(fh)
    _plain_tables(spec)
    _add_site_packages()
    try:
        from _pytest.assertion.rewrite import _rewrite_test
    except ImportError as exc:
        print(json.dumps({"written": [], "error": f"no pytest rewriter: {exc}"}))
        return 0
    written = []
    for path, name in spec["files"].items():
        source = Path(path).read_bytes()
        if entry_name(path, source) != name:
            continue  # not the bytes the grader named: nothing to cache
        try:
            # pytest >= 5.4: (stat or source hash, code); config=None is the rewrite of a pytest whose ini does
            # not enable the assertion pass hook (the runner uses entries only then)
            code = _rewrite_test(Path(path), None)[1]  # type: ignore[arg-type]  # pytest reads None as no config
        except Exception as exc:  # an older pytest's signature, a syntax error: pytest rewrites it itself
            print(f"{path}: not rewritten ({type(exc).__name__}: {exc})", file=sys.stderr)
            continue
        out = os.path.join(spec["out"], name)
        with open(out, "wb") as fh:
            fh.write(importlib.util.MAGIC_NUMBER + marshal.dumps(code))
        written.append(path)
    print(json.dumps({"written": written}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
