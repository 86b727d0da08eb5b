"""Run ruff (lint, then the format check) over the project, then mypy over the type-checked packages;
settings in pyproject.toml.

Usage: ``python scripts/lint.py [ruff check args...]`` (``make lint``); e.g. ``--fix`` or ``--select I``.
Exits non-zero when either finds a problem.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
# mypy must see the modules under their real names (swebox.envs...), but `swebox` has no folder: setup.cfg maps
# the top-level folders into it. These links make one; [tool.mypy] mypy_path points at their parent.
MYPY_ROOT = ROOT / ".cache" / "mypy" / "root"
LINKED = ("envs", "trainers", "scripts")


def link_package() -> None:
    package = MYPY_ROOT / "swebox"
    package.mkdir(parents=True, exist_ok=True)
    for name in LINKED:
        link = package / name
        if not link.is_symlink():
            link.symlink_to(os.path.relpath(ROOT / name, package))


def mypy() -> int:
    link_package()
    done = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True)
    # report the files where they live in the repository, not through the links
    shown = os.path.relpath(MYPY_ROOT / "swebox", ROOT) + os.sep
    sys.stdout.write(done.stdout.replace(shown, ""))
    sys.stderr.write(done.stderr)
    return done.returncode


def main(argv: list[str]) -> int:
    ruff = subprocess.call([sys.executable, "-m", "ruff", "check", *argv, str(ROOT)], cwd=ROOT)
    # the layout is ruff format's ([tool.ruff.format]); `ruff format .` rewrites what this reports
    formatted = subprocess.call([sys.executable, "-m", "ruff", "format", "--check", str(ROOT)], cwd=ROOT)
    typed = mypy()
    return ruff or formatted or typed


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
