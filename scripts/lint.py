"""Run ruff with the settings kept in setup.cfg's [tool:ruff] section.

ruff reads only TOML files; the project keeps its tool settings in setup.cfg, so this passes each key to
ruff as a ``--config KEY=VALUE`` override. Usage: ``python scripts/lint.py [ruff args...]``.
"""

from __future__ import annotations

import configparser
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent


def ruff_overrides(setup_cfg: pathlib.Path) -> list[str]:
    """``--config`` arguments for every key of the ``[tool:ruff]`` section (values are TOML literals)."""
    parser = configparser.ConfigParser(interpolation=None)
    parser.optionxform = str  # keep keys as written: ruff's keys are case-sensitive
    parser.read(setup_cfg)
    args: list[str] = []
    for key, value in parser.items("tool:ruff"):
        args += ["--config", f"{key} = {' '.join(value.split())}"]
    return args


def main(argv: list[str]) -> int:
    overrides = ruff_overrides(ROOT / "setup.cfg")
    checks = [["check", *overrides, *argv, str(ROOT)]]
    return max(subprocess.call([sys.executable, "-m", "ruff", *c], cwd=ROOT) for c in checks)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
