"""Grading's cache of rewritten test modules: pytest's assertion rewriting done once per pristine test file.

pytest rewrites the ``assert`` statements of every test module it imports; with ``python -B`` (which the
graded run keeps: nothing is written next to the repository's files) it does so again in every grade, about
half of a graded test command. This cache keeps the result on the host, where no sandbox can write:

- **Keyed by the pristine test file's bytes.** After the agent's diff is applied, the protected files are
  restored and the task's ``test_patch`` is applied, the host reads each of the task's test files and names
  its entry ``sha256(tag, path, bytes)`` (``rewrite_tests.entry_name``). The test files are protected (the diff
  filter drops every change to them, restoring puts back anything else), so the bytes are the task's own.
- **Filled from those bytes only.** A missing entry is compiled in the grading sandbox by
  ``rewrite_tests.py`` (``python -I -S -B``: no ``.pth``, no ``sitecustomize``, nothing of ``/testbed`` on
  ``sys.path``), before the tests run — no code of the agent's diff has run in the sandbox at that point —
  and only from a file whose bytes still hash to the name. The host copies it into the cache atomically.
  An entry is thus a pure function of a pristine test file: it cannot hold the fix (the fix lives in source
  files, which no entry is compiled from), and a file the agent wrote (a changed test, a ``__pycache__``
  pyc, which the filter drops anyway) never names an entry that is read for a task's test file.
- **Read-only in the sandbox.** The task's cache folder is bound read-only into the grading sandbox
  (``SandboxPolicy.ro_binds``); the runner maps each task test file to its entry and gives pytest that code
  instead of its own ``__pycache__`` lookup (``pytest_runner``). An entry is used for the path it was named
  for, whatever the file holds by then, so code under test that rewrites a task's test file at run time no
  longer changes the test that runs (it did without the cache).

- **The tests nothing may wrap, once per entry.** The runner's ``runner_origins.plain_tests`` (an ``ast`` walk of
  every test file, about a tenth of a toolz grade's test command) is a pure function of the same pristine
  bytes: ``rewrite_tests.py`` runs it with the task's interpreter when it compiles an entry and the host keeps
  the JSON list beside the entry, named after the entry plus a hash of ``runner_origins.py`` (a changed
  function never reads an old table). The runner gets the tables in its arguments file (read and deleted
  before any project code runs, like the entries' table) and parses only the files it was given none for.

The folder per task is ``<root>/<sha256(layers, python)>``: the layers fix the interpreter and pytest (and so
the magic number and the rewriter's output); root is ``$SWEBOX_REWRITE_CACHE``, else
``/var/tmp/swebox-rewritten-<uid>``, and must be the user's alone (grading refuses one others can write).
pytest versions whose rewriter has another signature (< 5.4) or whose ini enables
``enable_assertion_pass_hook`` simply do without the cache.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import stat
import tempfile
from pathlib import Path

from swebox.envs.sandbox import SandboxError
from swebox.envs.tasks.graders.rewrite_tests import entry_name

REWRITER = Path(__file__).with_name("rewrite_tests.py")
ORIGINS = Path(__file__).with_name("runner_origins.py")
PLAIN_SUFFIX = ".plain-" + hashlib.sha256(ORIGINS.read_bytes()).hexdigest()[:16]
"""An entry's table of plain tests: ``<entry><PLAIN_SUFFIX>``, keyed by the code that computed it."""
MAX_TEST_FILE_BYTES = 8 * 1024 * 1024
"""Test files larger than this are left to pytest (a cache entry is about 2-4x its source)."""


def cache_root() -> Path:
    """Host folder of every task's cache folder: $SWEBOX_REWRITE_CACHE, else a per-user folder in /var/tmp."""
    return Path(os.environ.get("SWEBOX_REWRITE_CACHE") or f"/var/tmp/swebox-rewritten-{os.getuid()}")


def folder_for(layers: list, python: str) -> Path:
    """The task's cache folder (created, mode 0755: readable by the sandbox's uid, writable by no sandbox)."""
    scope = json.dumps({"layers": [str(p) for p in layers], "python": python}, sort_keys=True)
    root = cache_root()
    folder = root / hashlib.sha256(scope.encode()).hexdigest()[:32]
    folder.mkdir(mode=0o755, parents=True, exist_ok=True)
    for path in (root, folder):  # a folder someone else made in /var/tmp could hold planted entries
        st = path.lstat()
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
            raise RuntimeError(
                f"rewritten-test cache {path}: expected a folder owned by uid {os.geteuid()} that "
                f"only it can write, found mode {stat.filemode(st.st_mode)} owned by uid "
                f"{st.st_uid}; remove it or set SWEBOX_REWRITE_CACHE to a folder of your own"
            )
    return folder


def _store(folder: Path, name: str, data: bytes) -> None:
    """Atomically: a reader sees a whole entry or none."""
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, folder / name)
    except BaseException:
        os.unlink(tmp)
        raise


def entries(sb, folder: Path, python: str, files: list[str], workdir: str, env: str) -> tuple[dict[str, str], int]:
    """``{/testbed/<file>: its entry in folder}`` for the task's (pristine, by now) test files, compiling the
    missing ones in the sandbox first; and how many were compiled. Call it before any code under test runs.

    ``env`` is the ``env -i`` assignments the grade monitor runs under (verdict.command)."""
    names: dict[str, str] = {}
    for file in dict.fromkeys(files):
        path = f"/testbed/{file}"
        try:
            names[path] = entry_name(path, sb.read_file(path, max_bytes=MAX_TEST_FILE_BYTES))
        except (OSError, SandboxError):
            continue  # missing, too large or not a regular file: pytest deals with it as before
    missing = {p: n for p, n in names.items() if not all((folder / f).is_file() for f in (n, n + PLAIN_SUFFIX))}
    if missing:
        out = f"{workdir}/rewritten"
        sb.write_file(f"{workdir}/rewrite_tests.py", REWRITER.read_bytes())
        sb.write_file(f"{workdir}/runner_origins.py", ORIGINS.read_bytes())
        spec = {"files": missing, "out": out, "plain": PLAIN_SUFFIX}
        sb.write_file(f"{workdir}/rewrite.json", json.dumps(spec))
        sb.exec(
            f"mkdir -p {out} && cd / && env -i {env} {shlex.quote(python)} -I -S -B "
            f"{workdir}/rewrite_tests.py {workdir}/rewrite.json",
            timeout=300,
        )
        for name in missing.values():
            for file in (name + PLAIN_SUFFIX, name):  # the entry last: with it, its table is there too
                try:
                    data = sb.read_file(f"{out}/{file}", max_bytes=16 * MAX_TEST_FILE_BYTES)
                except (OSError, SandboxError):
                    continue  # not rewritten (an older pytest, a syntax error): pytest rewrites it in the run
                _store(folder, file, data)
    return {p: str(folder / n) for p, n in names.items() if (folder / n).is_file()}, len(missing)


def plain_tables(rewritten: dict[str, str]) -> dict[str, list[str]]:
    """``{/testbed/<file>: its plain tests}`` for the entries of :func:`entries` that have a table (written with
    them, from the same pristine bytes); files without one are parsed by the runner itself."""
    tables: dict[str, list[str]] = {}
    for path, entry in rewritten.items():
        try:
            found = json.loads(Path(entry + PLAIN_SUFFIX).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(found, list) and all(isinstance(name, str) for name in found):
            tables[path] = found
    return tables
