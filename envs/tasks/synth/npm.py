"""npm packages as synthesis projects: a published tarball becomes a one-commit local git repository.

``npm_repository("npm:minimist@1.2.8", cache)`` asks the registry for the version's metadata, downloads its
tarball, checks it against the registry's ``dist.integrity`` (sha512), unpacks ``package/`` and commits it
as the only commit of a repository under ``cache`` (reused on the next call). A tarball holds what the
author published, without the ``.gitignore`` of its repository: one ignoring ``node_modules/`` is added, so
the env build's ``npm install`` (its devDependencies: the test runner and what the tests require) never
lands in the tree the agent sees or the task's diff.

The environment runs Node from the toolchain layer :data:`NODE_TOOLCHAINS` names (Debian's node 18), and
the tests with Node's own runner: ``node --test --test-reporter=tap`` over the package's test folder runs
every test file (tape, node:test or plain assert scripts alike) and reports one TAP result per file, which
SWE-bench's TAP parser (``log_parser='tap'``) reads. The registry is needed once per package (download)
and once per env build (``npm install``); grading and synthesis runs are offline.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import re
import shlex
import subprocess
import tarfile
import urllib.error
import urllib.request
from pathlib import Path, PurePosixPath

from swebox.envs.cache import EnvSpec
from swebox.envs.cache.build_commands import GIT_IDENTITY

REGISTRY = os.environ.get("SWEBOX_NPM_REGISTRY", "https://registry.npmjs.org")
"""The npm registry the package metadata and tarballs come from (``$SWEBOX_NPM_REGISTRY``)."""
LOG_PARSER = "tap"
"""SWE-bench's TAP parser reads ``node --test --test-reporter=tap``."""
TEST_DIRS = ("test", "tests", "__tests__", "spec")
"""Folders a package keeps its tests in (the first ones present are run)."""
NODE_TOOLCHAINS: tuple[str, ...] = ("node",)
"""The toolchain layers a JavaScript env names (``EnvSpec.toolchains``): Debian bookworm's node 18 and npm 9,
built into the store on first use. The env build, synthesis's sandboxes (``synth/env.py``), ``tasks validate``,
the log grader and episodes all stack it below the env layer with its PATH and NODE_PATH, so a task's tests
run on the node its ``npm install`` ran on, never the host's. ``()`` would run them on the host's node (the
sandbox's /usr bind), which differs from host to host."""
INSTALL = "npm install --ignore-scripts --no-audit --no-fund --no-package-lock"
"""The env build's install: dependencies and devDependencies, no lifecycle scripts (they may download
binaries, which no build may need), no lock file written into the tree."""
_SPEC = re.compile(r"^npm:(?P<name>(@[a-z0-9][\w.-]*/)?[a-z0-9][\w.-]*)@(?P<version>\d[\w.+-]*)$")
_GITIGNORE = "node_modules/\n"


class NpmError(ValueError):
    """A package spec, registry answer or tarball that cannot become a project; one line saying how to fix it."""


def default_cache() -> Path:
    """Where package repositories and the pinned parser live (``$SWEBOX_NPM_CACHE``, else ~/.cache/swebox/npm)."""
    return Path(os.environ.get("SWEBOX_NPM_CACHE") or Path.home() / ".cache" / "swebox" / "npm")


def parse_spec(spec: str) -> tuple[str, str]:
    """``"npm:minimist@1.2.8"`` -> ``("minimist", "1.2.8")``."""
    match = _SPEC.match(spec.strip())
    if not match:
        raise NpmError(
            f"--project: expected npm:NAME@VERSION with an exact version (e.g. npm:minimist@1.2.8); found {spec!r}."
        )
    return match["name"], match["version"]


def _get(url: str) -> bytes:
    try:
        with urllib.request.urlopen(url, timeout=120) as answer:
            return answer.read()
    except urllib.error.HTTPError as exc:
        raise NpmError(
            f"npm registry: expected {url} to answer; found HTTP {exc.code}. Check the name and "
            "version (`npm view NAME versions`)."
        ) from None
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        raise NpmError(
            f"npm registry: expected {REGISTRY} to be reachable; found {exc}. Set "
            "$SWEBOX_NPM_REGISTRY to a reachable registry or mirror."
        ) from None


def download(name: str, version: str) -> bytes:
    """The version's tarball, checked against the registry's sha512 ``dist.integrity``."""
    meta = json.loads(_get(f"{REGISTRY}/{name.replace('/', '%2F')}/{version}"))
    dist = meta.get("dist") or {}
    integrity = str(dist.get("integrity") or "")
    if not dist.get("tarball") or not integrity.startswith("sha512-"):
        raise NpmError(
            f"npm:{name}@{version}: expected dist.tarball and a sha512 dist.integrity in the registry's "
            f"metadata; found {sorted(dist)}."
        )
    data = _get(dist["tarball"])
    digest = base64.b64encode(hashlib.sha512(data).digest()).decode()
    if digest != integrity.removeprefix("sha512-"):
        raise NpmError(
            f"npm:{name}@{version}: the tarball's sha512 does not match the registry's integrity; "
            "the download is corrupt or was altered: retry, or check the registry."
        )
    return data


def _unpack(data: bytes, dest: Path) -> None:
    """Unpack the tarball's ``package/`` folder into ``dest`` (regular files and folders only)."""
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        for member in tar.getmembers():
            parts = PurePosixPath(member.name).parts
            if len(parts) < 2 or ".." in parts or not member.isfile():
                continue  # npm packs everything under package/; links and odd entries are not source
            target = dest.joinpath(*parts[1:])
            target.parent.mkdir(parents=True, exist_ok=True)
            source = tar.extractfile(member)
            assert source is not None  # a regular file always has its data
            target.write_bytes(source.read())
            target.chmod(0o755 if member.mode & 0o111 else 0o644)


def npm_repository(spec: str, cache: str | Path) -> Path:
    """The one-commit git repository of ``spec`` under ``cache`` (made once; ``.complete`` marks it whole)."""
    name, version = parse_spec(spec)
    repo = Path(cache) / f"{name.replace('/', '__')}-{version}"
    if (repo / ".git" / "swebox-complete").exists():
        return repo
    data = download(name, version)
    partial = repo.with_name(repo.name + f".partial-{os.getpid()}")
    subprocess.run(["rm", "-rf", str(partial)], check=True)
    partial.mkdir(parents=True)
    _unpack(data, partial)
    if not (partial / "package.json").exists():
        raise NpmError(f"{spec}: expected package/package.json in the tarball; found none. Not an npm package.")
    (partial / ".gitignore").write_text(_GITIGNORE)
    env = {**os.environ, **GIT_IDENTITY}  # the env builder's fixed identity: the same package, the same commit id
    for argv in (
        ["git", "init", "-q", "-b", "main"],
        ["git", "add", "-A"],
        ["git", "commit", "-q", "--no-verify", "-m", f"{name}@{version} from the npm registry"],
    ):
        subprocess.run(argv, cwd=partial, env=env, check=True, capture_output=True)
    (partial / ".git" / "swebox-complete").write_text(spec + "\n")
    subprocess.run(["rm", "-rf", str(repo)], check=True)
    partial.rename(repo)
    return repo


def test_paths(repo: str | Path) -> tuple[str, ...]:
    """The package's test folders (those of :data:`TEST_DIRS` it ships); empty when it ships none."""
    return tuple(d for d in TEST_DIRS if (Path(repo) / d).is_dir())


def env_spec(repo: str | Path, commit: str, python: str) -> EnvSpec:
    """The env of a JavaScript project: the repository with its npm dependencies installed in /testbed.

    A venv is still built (``python``): the log grader's monitor runs on the env's interpreter."""
    return EnvSpec(
        source=str(repo), commit=commit, python=python, install=(INSTALL,), test_deps=(), toolchains=NODE_TOOLCHAINS
    )


def test_cmd(tests: tuple[str, ...]) -> str:
    """The shell command that runs ``tests`` (folders or files) with Node's runner, one TAP result per file."""
    return " ".join(["node", "--test", "--test-reporter=tap", *(shlex.quote(t) for t in tests)])


def test_file(test_id: str) -> str | None:
    """The repository file a TAP id of :func:`test_cmd` names (``- /testbed/test/a.js`` -> ``test/a.js``)."""
    path = test_id.removeprefix("- ")
    return path.removeprefix("/testbed/") if path.startswith("/testbed/") else None
