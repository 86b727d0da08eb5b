"""The fixed commands and settings of a layer build: git's identity and dates, pip's settings, the step that
removes caches and bytecode, the byte-compile of the venv's third-party code, the one-commit history of
/testbed, and the command that makes /venv.

Shared by the env builder (builder.py), the checkout and task layers and the synthesis and Harbor builds, so
the same tree always gets the same commit id and no build leaves bytecode of a project's own source.
"""

from __future__ import annotations

import shlex

from .interpreters import Interpreter
from .spec import EnvSpec

GIT_IDENTITY = {
    "GIT_AUTHOR_NAME": "swebox",
    "GIT_AUTHOR_EMAIL": "swebox@localhost",
    "GIT_COMMITTER_NAME": "swebox",
    "GIT_COMMITTER_EMAIL": "swebox@localhost",
    "GIT_AUTHOR_DATE": "2000-01-01T00:00:00Z",
    "GIT_COMMITTER_DATE": "2000-01-01T00:00:00Z",
}
"""Fixed identity and dates: the same tree always gets the same commit id."""
CLEAN_STEP = (
    "find /testbed /venv /swebox \\( -name __pycache__ -o -name .pytest_cache -o -name .hypothesis "
    "-o -name .mypy_cache -o -name .ruff_cache \\) -prune -exec rm -rf {} + ; "
    "find /testbed /venv /swebox \\( -name '*.pyc' -o -name '.coverage' -o -name '.coverage.*' "
    "-o -name 'coverage.xml' \\) -delete"
)
# Byte-compiles the venv's third-party code (pytest and its dependencies: every grade imports them), never the
# project: files of distributions installed from a local tree (pip's direct_url.json says file://, editable
# installs included) and anything that resolves under /testbed are skipped, so no bytecode of the clean source
# exists to leak a fix. checked-hash .pycs are validated against their source's hash on every import (never
# mtimes, which layer copies need not keep): a changed source is recompiled in memory, never served stale.
# Python 3.6 syntax, standard library only (no importlib.metadata before 3.8: the dist-info folders are read);
# Python 3.6 has no checked-hash .pycs, so its venvs stay uncompiled.
COMPILE_THIRD_PARTY = """
import csv, json, os, py_compile, sys, sysconfig
sites = []
for key in ("purelib", "platlib"):
    if sysconfig.get_paths()[key] not in sites and os.path.isdir(sysconfig.get_paths()[key]):
        sites.append(sysconfig.get_paths()[key])
mode = getattr(py_compile, "PycInvalidationMode", None)
if mode is None:
    print("no checked-hash bytecode before Python 3.7: third-party code left uncompiled")
    sys.exit(0)
own = set()
for site in sites:
    for entry in os.listdir(site):
        info = os.path.join(site, entry)
        try:
            with open(os.path.join(info, "direct_url.json")) as fh:
                url = json.load(fh).get("url", "")
            if not url.startswith("file:"):
                continue
            with open(os.path.join(info, "RECORD"), newline="") as fh:
                own.update(os.path.realpath(os.path.join(site, row[0])) for row in csv.reader(fh) if row)
        except (OSError, ValueError, AttributeError):
            continue
done = 0
for site in sites:
    for folder, dirs, names in os.walk(site):
        for name in names:
            path = os.path.realpath(os.path.join(folder, name))
            if name.endswith(".py") and path not in own and not path.startswith("/testbed/"):
                done += py_compile.compile(path, quiet=2, invalidation_mode=mode.CHECKED_HASH) is not None
print("byte-compiled %d third-party modules; skipped %d files of the project's own install" % (done, len(own)))
"""
ONE_COMMIT = (
    "cd /testbed && rm -rf .git && git init -q -b main && git config core.logAllRefUpdates false "
    "&& git config gc.auto 0 && git add -A && git commit -q --no-verify -m 'swebox env snapshot' "
    "&& rm -rf .git/logs .git/hooks .git/COMMIT_EDITMSG .git/description "
    "&& git status --porcelain"
)


BUILD_PIP_ENV = {
    "PIP_NO_CACHE_DIR": "off",
    "PIP_NO_COMPILE": "1",
    "PIP_ROOT_USER_ACTION": "ignore",
    "PYTHONDONTWRITEBYTECODE": "1",
}
"""pip's settings of every build. ``PIP_NO_CACHE_DIR=off`` disables the cache in every pip (any value does
since pip 19); ``=1`` crashes pip 18 (Python 3.6's ensurepip: ``TypeError: expected str, bytes or
os.PathLike object, not int`` in build_session), which stored the parsed value as the cache folder."""


def venv_command(interp: Interpreter, spec: EnvSpec) -> str:
    """The command that makes /venv: a venv, or for recipes that run tox-current-env a prefix of its own.

    tox-current-env (SWE-bench's sphinx recipes: ``tox --current-env -epy39``) runs the tests through a symlink
    to ``sys.executable`` in ``.tox/py39/bin``. A venv is recognised by the ``pyvenv.cfg`` beside the path the
    interpreter was started by (``site.venv``), so through that symlink a venv's interpreter runs without the
    venv's packages: ``No module named pytest``, ~400 characters of output and no test result. SWE-bench's
    conda envs are real prefixes, found by resolving the symlink. So is this /venv: the interpreter's binary
    copied to /venv/bin, its standard library, ``lib-dynload``, headers and ``libpython`` linked from its prefix
    (bound read-only like a venv's home), an empty ``site-packages`` of its own that pip installs into, and a
    ``bin/activate`` that puts ``/venv/bin`` first on PATH.
    """
    python = shlex.quote(interp.path)
    if not any("tox-current-env" in c for c in (*spec.install, *spec.test_deps, *spec.setup)):
        return f"{python} -m venv /venv"
    version = "python" + ".".join(interp.version.split(".")[:2])
    prefix = shlex.quote(interp.prefix)
    return (
        f"set -e; mkdir -p /venv/bin /venv/lib/{version}/site-packages; cp {python} /venv/bin/{version}; "
        f"ln -s {version} /venv/bin/python3; ln -s {version} /venv/bin/python; "
        f"for f in {prefix}/lib/{version}/*; do if [ \"${{f##*/}}\" != site-packages ]; then ln -s \"$f\" "
        f"/venv/lib/{version}/; fi; done; for f in {prefix}/lib/libpython3*.so*; do if [ -e \"$f\" ]; then "
        f"ln -s \"$f\" /venv/lib/; fi; done; if [ -d {prefix}/include ]; then ln -s {prefix}/include "
        "/venv/include; fi; printf '%s\\n' '# a prefix, not a venv: activating puts its bin first on PATH' "
        "'export PATH=\"/venv/bin:$PATH\"' 'unset PYTHONHOME' > /venv/bin/activate; "
        "/venv/bin/python -Im ensurepip --upgrade --default-pip && /venv/bin/python -c 'import sys; "
        "assert sys.prefix == \"/venv\", sys.prefix'"
    )
