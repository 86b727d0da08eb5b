"""Fetch an EnvSpec's repository snapshot onto the host as a plain tree (no .git): the build input.

- local git repository: ``git archive COMMIT`` (tracked files only, nothing of the history);
- PyPI: ``pip download --no-deps --no-binary NAME NAME==VERSION`` (the sdist, which for the projects we use
  ships its tests), unpacked with tarfile's ``data`` filter;
- ``git+URL``: a clone, then ``git archive`` like a local repository; with a git mirror
  (``--git-mirror DIR`` / ``$SWEBOX_GIT_MIRROR``) a GitHub URL ``.../OWNER/NAME`` is read from
  ``DIR/OWNER__NAME.git`` (bare or shallow) instead, so offline clusters build too.

Which failures are the spec's (recorded in the store, fail fast until ``--force``) and which the host's
(not recorded: a retry after fixing the network or the mirror just works): a commit that a complete clone
lacks is the spec's; a clone that fails (network), a repository missing from the mirror, or a commit
missing from a mirror (it may be stale or shallow) are the host's.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

from .spec import EnvSpec, parse_pypi, source_kind
from .store import BuildFailure

MIRROR_ENV = "SWEBOX_GIT_MIRROR"
_GITHUB = re.compile(
    r"^git\+(?:https?://|ssh://git@|git@)github\.com[/:](?P<owner>[^/]+)/(?P<name>[^/]+?)(?:\.git)?/?$"
)


class MirrorError(OSError):
    """The git mirror lacks a repository or a commit: fix the mirror (not recorded as a failed build)."""


def _git(*args: str, cwd: str | Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)


def github_name(source: str) -> tuple[str, str] | None:
    """``git+https://github.com/OWNER/NAME(.git)`` -> ``(OWNER, NAME)``; None for other sources."""
    match = _GITHUB.match(source)
    return (match["owner"], match["name"]) if match else None


def mirror_path(source: str, mirror: str) -> Path | None:
    """Where a git mirror folder keeps ``source``'s repository: ``MIRROR/OWNER__NAME.git`` (None: no mirror
    or not a GitHub source). A missing repository is a :class:`MirrorError` naming the path expected."""
    name = github_name(source)
    if not mirror or name is None:
        return None
    path = Path(mirror) / f"{name[0]}__{name[1]}.git"
    if not path.is_dir():
        raise MirrorError(
            f"git mirror {mirror}: expected the repository {name[0]}/{name[1]} at {path} (a bare "
            f"or shallow clone, e.g. `git clone --bare https://github.com/{name[0]}/{name[1]} "
            f"{path}`); found nothing there."
        )
    return path


def resolve_mirror(mirror: str | None) -> str:
    """The mirror folder: the argument, else ``$SWEBOX_GIT_MIRROR``, else '' (no mirror)."""
    return mirror if mirror is not None else os.environ.get(MIRROR_ENV, "")


def require_commit(repo: Path, commit: str, *, from_mirror: bool) -> str:
    """The full id of ``commit`` in ``repo``; a missing one is the spec's fault unless the repo is a mirror."""
    out = _git("rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}", cwd=repo)
    if out.returncode == 0:
        return out.stdout.strip()
    if from_mirror:
        raise MirrorError(
            f"git mirror {repo}: expected commit {commit}; found no such commit (a stale or "
            f"shallow mirror?). Fetch it: `git -C {repo} fetch origin {commit}`."
        )
    raise BuildFailure(
        f"source {repo}: commit {commit} does not exist there; pin a commit of that "
        f"repository (`git -C {repo} rev-parse HEAD`)."
    )


def git_repository(spec: EnvSpec, scratch: Path, log: list[str], mirror: str = "") -> tuple[Path, bool]:
    """A local git repository holding ``spec``'s history, and whether it is a mirror: the mirror's copy, the
    local source itself, or a fresh clone into ``scratch`` (network; a failed clone is the host's fault)."""
    kind = source_kind(spec.source)
    if kind == "local":
        repo = Path(spec.source)
        if not (repo / ".git").exists() and _git("rev-parse", "--git-dir", cwd=repo).returncode != 0:
            raise BuildFailure(
                f"source {repo}: expected a git repository; found "
                f"{'a folder without .git' if repo.is_dir() else 'nothing'}."
            )
        return repo, False
    if kind != "git":
        raise ValueError(f"git_repository: expected a git source; found {spec.source!r}.")
    path = mirror_path(spec.source, mirror)
    if path is not None:
        log.append(f"# {spec.source[4:]} from the git mirror {path}")
        return path, True
    log.append(f"$ git clone --bare {spec.source[4:]}")
    proc = _git("clone", "--quiet", "--bare", spec.source[4:], str(scratch))
    log.append(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        raise OSError(
            f"cloning {spec.source[4:]} failed (network? not recorded as a broken spec; retry, or "
            f"use a git mirror with --git-mirror DIR / ${MIRROR_ENV}): {proc.stderr.strip()[-500:]}"
        )
    return scratch, False


def missing_objects(repo: Path, commit: str, limit: int = 5) -> list[str]:
    """``"SHA (path)"`` for each object of ``commit``'s tree that ``repo`` lacks (at most ``limit``)."""
    listed = _git("rev-list", "--objects", "--missing=print", "--no-walk", commit, cwd=repo)
    missing = [line[1:].strip() for line in listed.stdout.splitlines() if line.startswith("?")]
    if not missing:
        return []
    paths: dict[str, str] = {}
    for entry in _git("ls-tree", "-r", "-t", "-z", commit, cwd=repo).stdout.split("\0"):
        meta, _, path = entry.partition("\t")
        if len(meta.split()) == 3:
            paths.setdefault(meta.split()[2], path)
    return [f"{sha} ({paths[sha]})" if sha in paths else sha for sha in missing[:limit]] + (
        [f"and {len(missing) - limit} more"] if len(missing) > limit else []
    )


def require_objects(repo: Path, commit: str, *, from_mirror: bool) -> None:
    """Raise, naming them and the fix, when objects of ``commit``'s tree are missing from ``repo``.

    Not the spec's fault either way (not recorded): a mirror copied in part, a pruned or partial clone. A bare
    ``git archive`` would only say ``tar: Unexpected EOF in archive`` (astropy-14365's mirror lacked a blob).
    """
    missing = missing_objects(repo, commit)
    if not missing:
        return
    what = f"git mirror {repo}" if from_mirror else f"repository {repo}"
    raise (MirrorError if from_mirror else OSError)(
        f"{what}: expected every object of commit {commit}; found missing: {', '.join(missing)} (an incomplete "
        f"copy: cut short, pruned, or a partial clone). Fetch them again: `git -C {repo} fetch --refetch "
        f"origin` (git >= 2.36), or clone the repository again (`git clone --bare URL {repo}`)."
    )


def _archive(repo: Path, commit: str, dest: Path, *, from_mirror: bool = False) -> None:
    commit = require_commit(repo, commit, from_mirror=from_mirror)
    dest.mkdir(parents=True)
    archive = subprocess.Popen(
        ["git", "archive", "--format=tar", commit], cwd=repo, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    untar = subprocess.run(["tar", "-x", "-C", str(dest)], stdin=archive.stdout, capture_output=True, text=True)
    archive.stdout.close()
    errors = archive.stderr.read().decode(errors="replace")
    archive.stderr.close()
    if archive.wait() != 0 or untar.returncode != 0:
        require_objects(repo, commit, from_mirror=from_mirror)
        raise OSError(f"git archive {commit} of {repo} failed: {(errors + untar.stderr).strip()[-1500:]}")


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


def fetch_source(spec: EnvSpec, dest: Path, log: list[str], mirror: str = "") -> None:
    """Write the snapshot's files into the new folder ``dest``; appends what it ran to ``log``.
    ``mirror``: a git mirror folder for GitHub sources ('' = clone from the URL)."""
    kind = source_kind(spec.source)
    if kind in ("local", "git"):
        repo, from_mirror = git_repository(spec, dest.parent / "clone.git", log, mirror)
        log.append(f"$ git -C {repo} archive {spec.commit}")
        _archive(repo, spec.commit, dest, from_mirror=from_mirror)
        if repo == dest.parent / "clone.git":
            shutil.rmtree(repo, ignore_errors=True)
    else:
        name, version = parse_pypi(spec.source)
        downloads = dest.parent / "downloads"
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--no-binary",
            name,
            "-d",
            str(downloads),
            f"{name}=={version}",
        ]
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
