"""A tiny project the builder tests install: a package, a few pytest tests, a local git repository."""

from __future__ import annotations

import subprocess
from pathlib import Path

FILES = {
    "pyproject.toml": '[build-system]\nrequires = ["setuptools>=61"]\n'
    'build-backend = "setuptools.build_meta"\n\n'
    '[project]\nname = "calc"\nversion = "0.1"\n',
    "src/calc/__init__.py": "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a * b\n",
    "src/calc/util.py": "def clamp(x, lo, hi):\n    return max(lo, min(x, hi))\n",
    "tests/test_calc.py": "from calc import add, mul\n\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\n"
    "def test_mul():\n    assert mul(2, 3) == 6\n",
    "tests/test_util.py": "from calc.util import clamp\n\n\ndef test_clamp():\n    assert clamp(5, 0, 3) == 3\n",
    "README.md": "calc\n",
}


def write_repo(root: Path) -> tuple[Path, str]:
    """Create the repository with two commits (history the env layer must drop); returns (path, HEAD)."""
    root.mkdir(parents=True)
    for rel, text in FILES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    git = ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q", "-b", "main"], check=True)
    (root / "SECRET_FUTURE_FIX.txt").write_text("from an earlier commit\n")
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "first"], check=True)
    (root / "SECRET_FUTURE_FIX.txt").unlink()
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "second"], check=True)
    subprocess.run([*git, "remote", "add", "origin", "https://example.invalid/calc.git"], check=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True)
    return root, head.stdout.strip()
