"""The realistic environment `swebox bench sandbox` measures in, built once and cached under --work.

A layer folder with a virtualenv holding numpy, pytest and requests and a real project's source tree (Django's
sdist) as /testbed, about 120 MB in more than 10,000 files, the interpreter its venv needs recorded beside it;
a copy N times larger; and the paper's format, one tar.gz of both trees.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
from pathlib import Path

from swebox.envs.sandbox import Layer
from swebox.envs.sandbox.layers import write_record

PACKAGES = ("numpy", "pytest", "requests")
PROJECT = "django==5.2.8"


def build_environment(work: Path, python: str) -> Path:
    """A layer folder with venv/ (numpy, pytest, requests) and testbed/ (a real project's sources)."""
    layer = work / "env"
    if (layer / ".complete").exists():
        return _recorded(layer, python)
    shutil.rmtree(layer, ignore_errors=True)
    layer.mkdir(parents=True)
    subprocess.run([python, "-m", "venv", str(layer / "venv")], check=True)
    subprocess.run([str(layer / "venv/bin/python"), "-m", "pip", "install", "-q", *PACKAGES], check=True)
    download = work / "download"
    subprocess.run(
        [
            str(layer / "venv/bin/python"),
            "-m",
            "pip",
            "download",
            "-q",
            "--no-deps",
            "--no-binary",
            ":all:",
            "-d",
            str(download),
            PROJECT,
        ],
        check=True,
    )
    sdist = next(download.glob("*.tar.gz"))
    with tarfile.open(sdist) as tar:
        tar.extractall(work / "src", filter="data")
    shutil.move(str(next((work / "src").iterdir())), layer / "testbed")
    shutil.rmtree(work / "src")
    (layer / ".complete").touch()
    return _recorded(layer, python)


def _recorded(layer: Path, python: str) -> Path:
    """Declare, beside the layer, the interpreter its venv needs (as the env builder does in its manifest)."""
    prefix = subprocess.run(
        [python, "-c", "import sys; print(sys.base_prefix)"], capture_output=True, text=True, check=True
    ).stdout.strip()
    write_record(layer, [prefix])
    return layer


def scaled_copy(layer: Path, work: Path, factor: int) -> Path:
    """The same environment plus factor-1 more copies of its trees: factor times the bytes and files."""
    big = work / f"env-x{factor}"
    if not (big / ".complete").exists():
        shutil.rmtree(big, ignore_errors=True)
        subprocess.run(["cp", "-a", str(layer), str(big)], check=True)
        for i in range(1, factor):
            subprocess.run(["cp", "-a", str(layer / "venv"), str(big / f"venv-copy{i}")], check=True)
            subprocess.run(["cp", "-a", str(layer / "testbed"), str(big / f"testbed-copy{i}")], check=True)
    write_record(big, Layer(layer).interpreters)
    return big


def archive(layer: Path) -> Path:
    """The paper's format: one tar.gz of the venv and the repository."""
    target = layer.with_suffix(".tar.gz")
    if not target.exists():
        subprocess.run(["tar", "-czf", str(target) + ".tmp", "-C", str(layer), "venv", "testbed"], check=True)
        os.rename(str(target) + ".tmp", target)
    return target


def size_of(folder: Path) -> tuple[int, int]:
    files, total = 0, 0
    for root, _dirs, names in os.walk(folder):
        for name in names:
            files += 1
            total += os.lstat(os.path.join(root, name)).st_size
    return files, total
