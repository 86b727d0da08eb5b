"""Fetch an EnvSpec's repository snapshot onto the host as a plain tree (no .git): the build input.

- local git repository: ``git archive COMMIT`` (tracked files only, nothing of the history);
- PyPI: ``pip download --no-deps --no-binary NAME NAME==VERSION`` (the sdist, which for the projects we use
  ships its tests), unpacked with tarfile's ``data`` filter;
- ``git+URL``: a clone, then ``git archive`` like a local repository (online only).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

from .spec import EnvSpec, parse_pypi, source_kind
from .store import BuildFailure


def _git(*args: str, cwd: str | Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)


def _archive(repo: Path, commit: str, dest: Path) -> None:
    if _git("cat-file", "-e", f"{commit}^{{commit}}", cwd=repo).returncode != 0:
        raise BuildFailure(f"source {repo}: commit {commit} does not exist there; pin a commit of that "
                           f"repository (`git -C {repo} rev-parse HEAD`).")
    dest.mkdir(parents=True)
    archive = subprocess.Popen(["git", "archive", "--format=tar", commit], cwd=repo, stdout=subprocess.PIPE)
    untar = subprocess.run(["tar", "-x", "-C", str(dest)], stdin=archive.stdout, capture_output=True,
                           text=True)
    archive.stdout.close()
    if archive.wait() != 0 or untar.returncode != 0:
        raise OSError(f"git archive {commit} of {repo} failed: {untar.stderr.strip()}")


def _unpack_sdist(sdist: Path, dest: Path) -> None:
    staging = Path(tempfile.mkdtemp(dir=dest.parent))
    if sdist.name.endswith(".zip"):
        with zipfile.ZipFile(sdist) as z:
            for name in z.namelist():
                if name.startswith("/") or ".." in name.split("/"):
                    raise BuildFailure(f"sdist {sdist.name}: unsafe member {name!r}")
            z.extractall(staging)
    else:
        with tarfile.open(sdist) as tar:
            tar.extractall(staging, filter="data")
    tops = list(staging.iterdir())
    root = tops[0] if len(tops) == 1 and tops[0].is_dir() else staging
    shutil.move(str(root), dest)
    shutil.rmtree(staging, ignore_errors=True)


def fetch_source(spec: EnvSpec, dest: Path, log: list[str]) -> None:
    """Write the snapshot's files into the new folder ``dest``; appends what it ran to ``log``."""
    kind = source_kind(spec.source)
    if kind == "local":
        repo = Path(spec.source)
        if not (repo / ".git").exists() and _git("rev-parse", "--git-dir", cwd=repo).returncode != 0:
            raise BuildFailure(f"source {repo}: expected a git repository; found "
                               f"{'a folder without .git' if repo.is_dir() else 'nothing'}.")
        log.append(f"$ git -C {repo} archive {spec.commit}")
        _archive(repo, spec.commit, dest)
    elif kind == "git":
        clone = dest.parent / "clone"
        log.append(f"$ git clone {spec.source[4:]}")
        proc = _git("clone", "--quiet", "--no-checkout", spec.source[4:], str(clone))
        log.append(proc.stdout + proc.stderr)
        if proc.returncode != 0:
            raise BuildFailure(f"cloning {spec.source[4:]} failed: {proc.stderr.strip()[-500:]}",
                               "\n".join(log))
        _archive(clone, spec.commit, dest)
        shutil.rmtree(clone, ignore_errors=True)
    else:
        name, version = parse_pypi(spec.source)
        downloads = dest.parent / "downloads"
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", name, "-d",
               str(downloads), f"{name}=={version}"]
        log.append("$ " + " ".join(cmd))
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        log.append(proc.stdout + proc.stderr)
        sdists = sorted(downloads.glob("*")) if downloads.exists() else []
        if proc.returncode != 0 or not sdists:
            what = f"pip download of {name}=={version} (sdist) failed (exit {proc.returncode})"
            if "No matching distribution" in proc.stdout + proc.stderr:
                raise BuildFailure(f"{what}: PyPI has no sdist of that version", "\n".join(log))
            # anything else (network, index down) says nothing about the spec: not recorded as failed
            raise OSError(f"{what}:\n{(proc.stdout + proc.stderr)[-1500:]}")
        _unpack_sdist(sdists[0], dest)
