"""Find Python interpreters on the host by version (pyenv, uv-managed, conda, system, PATH).

A venv's ``bin/python`` points at its interpreter, so the interpreter must be visible inside every
sandbox at the same path, read-only: we return its prefix (the folder to bind). The sandbox's root is an
unprivileged host uid, so an interpreter is only usable when every folder above it is traversable by
others (pyenv under a 0700 /root is not); such interpreters are found but ranked last and flagged.
"""

from __future__ import annotations

import functools
import glob
import json
import os
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path

_PROBE = (
    "import json, os, sys; print(json.dumps({'version': '%d.%d.%d' % sys.version_info[:3], "
    "'prefix': sys.base_prefix, 'venv': sys.prefix != sys.base_prefix, "
    "'executable': os.path.realpath(sys.executable)}))"
)


@dataclass(frozen=True)
class Interpreter:
    """One Python installation on the host."""

    path: str
    """The executable (resolved, no symlinks)."""
    version: str
    """'3.11.7'."""
    prefix: str
    """sys.base_prefix: the folder to bind read-only into sandboxes."""
    reachable: bool
    """Whether an unprivileged uid can traverse every folder down to it (needed inside sandboxes)."""


class InterpreterNotFound(LookupError):
    """No interpreter of the requested version on this host."""


def _candidate_paths() -> list[str]:
    home = Path.home()
    roots = [os.environ.get("PYENV_ROOT", ""), str(home / ".pyenv")]
    patterns = [f"{r}/versions/*/bin/python3" for r in roots if r]
    patterns += [
        f"{home}/.local/share/uv/python/*/bin/python3",
        os.environ.get("UV_PYTHON_INSTALL_DIR", "") and f"{os.environ['UV_PYTHON_INSTALL_DIR']}/*/bin/python3",
    ]
    conda_roots = [
        os.environ.get("CONDA_PREFIX", ""),
        str(home / "miniconda3"),
        str(home / "anaconda3"),
        str(home / "miniforge3"),
        "/opt/conda",
    ]
    for root in filter(None, conda_roots):
        patterns += [f"{root}/bin/python3", f"{root}/envs/*/bin/python3"]
    # readable prefixes other users can use: /opt/python/3.9 (where the error below says to put one),
    # python.org/`make altinstall` builds under /opt or /usr/local, SWEBOX_PYTHONS (colon-separated prefixes)
    extra = [p for p in os.environ.get("SWEBOX_PYTHONS", "").split(os.pathsep) if p]
    patterns += [f"{prefix}/bin/python3" for prefix in extra]
    patterns += [
        "/opt/python/*/bin/python3",
        "/opt/python*/bin/python3",
        "/opt/*/bin/python3.*",
        "/usr/local/python*/bin/python3",
        "/usr/bin/python3.*",
        "/usr/local/bin/python3.*",
    ]
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        patterns += [f"{folder}/python3", f"{folder}/python3.*"] if folder else []
    found: list[str] = []
    for pattern in filter(None, patterns):
        for path in sorted(glob.glob(pattern)):
            # pyenv shims are shell scripts; python3.11-config, python3.9m-config and gdb helpers are no pythons
            skip = path.endswith(("-config", "-gdb.py")) or "/shims/" in path
            if not skip and os.access(path, os.X_OK) and os.path.isfile(path):
                found.append(path)
    return found


def reachable_by_others(path: str) -> bool:
    """True when every folder from / down to ``path`` lets other users in (o+x) and the file is o+x."""
    p = Path(path)
    for folder in [*reversed(p.parents), p]:
        try:
            if not os.stat(folder).st_mode & stat.S_IXOTH:
                return False
        except OSError:
            return False
    return True


@functools.lru_cache(maxsize=1)
def discover() -> tuple[Interpreter, ...]:
    """Every distinct non-venv interpreter found on the host (probed once per process)."""
    seen: dict[str, Interpreter] = {}
    for path in _candidate_paths():
        real = os.path.realpath(path)
        if real in seen:
            continue
        try:
            out = subprocess.run([real, "-c", _PROBE], capture_output=True, text=True, timeout=20)
            info = json.loads(out.stdout)
        except (OSError, subprocess.TimeoutExpired, ValueError):
            continue
        if info["venv"] or not info["version"].startswith("3."):
            continue  # a venv's python cannot be the home of another venv portably
        exe = info["executable"]
        seen[real] = seen.get(exe) or Interpreter(exe, info["version"], info["prefix"], reachable_by_others(exe))
    return tuple({i.path: i for i in seen.values()}.values())


def _version_tuple(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in v.split("."))


def matches(version: str, wanted: str) -> bool:
    """'3.11.7' matches '3.11' and '3.11.7', not '3.1' or '3.11.8'."""
    return _version_tuple(version)[: len(_version_tuple(wanted))] == _version_tuple(wanted)


def find_interpreter(wanted: str, candidates: tuple[Interpreter, ...] | None = None) -> Interpreter:
    """The best interpreter for ``wanted`` ('3.11' or '3.11.7'): reachable ones first, then the newest."""
    pool = discover() if candidates is None else candidates
    hits = [i for i in pool if matches(i.version, wanted)]
    if not hits:
        available = sorted({i.version for i in pool}, key=_version_tuple)
        raise InterpreterNotFound(
            f"no Python {wanted} on this host; available: {', '.join(available) or 'none'}. Install it where "
            f"every user can read it (sandboxes run as an unprivileged uid), e.g. "
            f"`UV_PYTHON_INSTALL_DIR=/opt/python uv python install {wanted}` (found under /opt/python), a "
            f"system package (`apt-get install python{wanted}` where the release has it, e.g. Debian bullseye "
            f"has 3.9), or a prefix named in $SWEBOX_PYTHONS; or change the spec's python."
        )
    return max(hits, key=lambda i: (i.reachable, _version_tuple(i.version)))
