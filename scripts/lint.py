"""Run ruff over the project with the settings in pyproject.toml ([tool.ruff]).

Usage: ``python scripts/lint.py [ruff check args...]`` (``make lint``); e.g. ``--fix`` or ``--select I``.
"""

from __future__ import annotations

import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent


def main(argv: list[str]) -> int:
    return subprocess.call([sys.executable, "-m", "ruff", "check", *argv, str(ROOT)], cwd=ROOT)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
