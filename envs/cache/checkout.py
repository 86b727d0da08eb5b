"""Checkout layers: a task layer that moves the env layer's repository to another commit of its history.

Public datasets build the environment at one commit and start the task at another: SWE-bench installs the
dependencies at ``environment_setup_commit`` and the agent starts at ``base_commit``; SWE-smith starts from
its snapshot commit with the row's bug patch applied. A :class:`CheckoutSpec` says which tree the task
starts from (a commit of the env's repository, plus an optional patch, plus commands such as SWE-bench's
``pre_install``/``install`` run at that tree); :func:`build_checkout_layer` publishes it as a task layer
over the env layer, with the guarantees of :mod:`.task_layer`: a new root commit of exactly that tree on
``main`` and the objects of the env's version of every changed path deleted, so nothing of the later history
is visible inside the sandbox.

The tree is computed on the host from the git repository (a mirror, the local source, or a clone) with a
temporary index: ``read-tree COMMIT``, ``apply --cached PATCH``, ``write-tree``; the changed files travel
into the build sandbox as one tar (modes and symlinks kept).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shlex
import subprocess
import tarfile
import tempfile
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..sandbox import Sandbox, SandboxPolicy
from ..sandbox.policy import DEFAULT_ENV
from .build_commands import BUILD_PIP_ENV, CLEAN_STEP, GIT_IDENTITY
from .layer_cache import LayerCache, LayerCacheConfig
from .manifest import Manifest
from .pip_settings import PackageSettings, host_package_settings, write_files
from .sources import git_repository, require_commit, require_objects, source_kind
from .spec import EnvSpec
from .store import BuildFailure, LayerStore
from .task_layer import commit_paths, objects_before, remove_unreachable, run_step
from .toolchains import env_toolchains, toolchain_env

_RESTORE_LIST = "/tmp/swebox-restore-paths"
"""NUL-separated tracked paths :func:`clean_keeping_tracked` checks out again (outside /testbed)."""


@dataclass(frozen=True)
class CheckoutSpec:
    """The starting tree of a task: ``commit`` of the env's repository (+ ``patch``), then ``commands``."""

    env: EnvSpec
    """The env layer underneath; its source's git history must hold ``commit``."""
    commit: str
    """The commit the task starts from (SWE-bench's base_commit, SWE-smith's snapshot)."""
    patch: str = ""
    """A git diff applied on top of ``commit`` (SWE-smith's bug); '' for none."""
    commands: tuple[str, ...] = ()
    """Shell commands run in /testbed with /venv active once the tree is in place (SWE-bench's pre_install
    and install); their changes to /testbed and /venv are part of the layer."""

    def __post_init__(self) -> None:
        if source_kind(self.env.source) == "pypi":
            raise ValueError(f"CheckoutSpec.env: expected a git source with history; found {self.env.source!r}.")
        if not self.commit or not all(c in "0123456789abcdef" for c in self.commit):
            raise ValueError(f"CheckoutSpec.commit: expected a hex commit id; found {self.commit!r}.")
        if isinstance(self.commands, str) or not all(isinstance(c, str) for c in self.commands):
            raise ValueError(f"CheckoutSpec.commands: expected a list of shell commands; found {self.commands!r}.")
        object.__setattr__(self, "commands", tuple(self.commands))

    def key(self) -> str:
        """``"task-"`` + 20 hex of sha256 over the env key, the commit, the patch's hash and the commands."""
        body = {
            "kind": "checkout",
            "env": self.env.key(),
            "commit": self.commit,
            "commands": list(self.commands),
            "patch": hashlib.sha256(self.patch.encode("utf-8", "surrogateescape")).hexdigest(),
        }
        return "task-" + hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:20]


def _git(repo: Path, *args: str, env: dict | None = None, data: bytes | None = None) -> bytes:
    proc = subprocess.run(["git", *args], cwd=repo, input=data, capture_output=True, env={**os.environ, **(env or {})})
    if proc.returncode != 0:
        raise BuildFailure(f"git {' '.join(args[:3])} in {repo} failed: {proc.stderr.decode(errors='replace')[-800:]}")
    return proc.stdout


def target_tree(repo: Path, commit: str, patch: str) -> str:
    """The tree id of ``commit`` with ``patch`` applied (a patch that does not apply is the spec's fault)."""
    if not patch:
        return _git(repo, "rev-parse", f"{commit}^{{tree}}").decode().strip()
    with tempfile.TemporaryDirectory(prefix="swebox-checkout-") as tmp:
        env = {"GIT_INDEX_FILE": f"{tmp}/index"}
        _git(repo, "read-tree", commit, env=env)
        (Path(tmp) / "patch.diff").write_text(patch, encoding="utf-8", errors="surrogateescape")
        proc = subprocess.run(
            ["git", "apply", "--cached", "--binary", f"{tmp}/patch.diff"],
            cwd=repo,
            capture_output=True,
            text=True,
            env={**os.environ, **env},
        )
        if proc.returncode != 0:
            raise BuildFailure(f"the task's patch does not apply to {commit}: {proc.stderr.strip()[-800:]}")
        return _git(repo, "write-tree", env=env).decode().strip()


def changed_files(repo: Path, old: str, new_tree: str) -> tuple[bytes, list[str], list[str]]:
    """(a tar of the files that differ in ``new_tree``, their paths, the paths it deletes) against ``old``."""
    out = _git(repo, "diff-tree", "-r", "-z", "--no-renames", old, new_tree).split(b"\0")
    buf, written, deleted = io.BytesIO(), [], []
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for meta, raw in zip(out[0::2], out[1::2], strict=False):
            if not meta:
                continue
            _, new_mode, _, sha, status = meta.decode().lstrip(":").split(" ")
            path = raw.decode("utf-8", "surrogateescape")
            if status.startswith("D"):
                deleted.append(path)
                continue
            if new_mode == "160000":
                continue  # a submodule's commit: nothing to write (SWE-bench repos have none)
            data = _git(repo, "cat-file", "blob", sha)
            info = tarfile.TarInfo(path)
            if new_mode == "120000":
                info.type, info.linkname = tarfile.SYMTYPE, data.decode("utf-8", "surrogateescape")
                tar.addfile(info)
            else:
                info.size, info.mode = len(data), 0o755 if new_mode == "100755" else 0o644
                tar.addfile(info, io.BytesIO(data))
            written.append(path)
    return buf.getvalue(), written, deleted


def nearest_tag(repo: Path, commit: str) -> str:
    """The name of the nearest version-like tag (one with a digit) reachable from ``commit``; '' for none (no
    tags in the mirror, a shallow one).

    The starting tree is one root commit without history, so ``git describe`` finds no tag there, and
    projects that take their version from git (setuptools_scm, versioneer) would install as ``0.1.dev1``.
    pytest then refuses its own ``minversion = 2.0`` (tox.ini) with ``ERROR: ... requires pytest-2.0, actual
    pytest-0.1.dev1``, so no test of a pytest-dev/pytest row runs; SWE-bench's images clone the full history
    with its tags. The root commit gets this tag (the name only: it reveals the version, nothing of the
    history), so the install and any reinstall by the agent see ``5.1.2`` where upstream says
    ``5.1.3.dev12+g8aba863`` (the distance to the tag is not kept).
    """
    proc = subprocess.run(
        ["git", "describe", "--tags", "--abbrev=0", "--match", "*[0-9]*", commit],
        cwd=repo,
        capture_output=True,
        text=True,
    )
    name = proc.stdout.strip() if proc.returncode == 0 else ""
    ok = subprocess.run(["git", "check-ref-format", f"refs/tags/{name}"], capture_output=True).returncode == 0
    return name if name and ok else ""


def _tag(sb: Sandbox, commit: str, tag: str) -> str:
    """Point the lightweight tag ``tag`` (none when '') at ``commit``; returns ``commit``."""
    if tag:
        run_step(sb, f"cd /testbed && git tag -f {shlex.quote(tag)} {commit}", f"tagging the starting commit {tag}")
    return commit


def clean_keeping_tracked(sb: Sandbox) -> None:
    """Remove caches and bytecode (the builder's ``CLEAN_STEP``) but not files the starting commit tracks: a
    repository may commit a ``.pyc`` or a ``__pycache__`` folder as test data (a sphinx test root's). Tracked
    files the commands themselves deleted stay deleted."""
    listing = "cd /testbed && git ls-files -z --deleted"
    before = set(run_step(sb, listing, "listing deleted files").split("\0"))
    run_step(sb, CLEAN_STEP, "removing caches and bytecode")
    lost = sorted(set(run_step(sb, listing, "listing deleted files").split("\0")) - before - {""})
    if lost:
        sb.write_file(_RESTORE_LIST, b"".join(p.encode("utf-8", "surrogateescape") + b"\0" for p in lost))
        run_step(
            sb,
            f"cd /testbed && git checkout-index -f -z --stdin < {_RESTORE_LIST} && rm -f {_RESTORE_LIST}",
            "restoring tracked files the cleanup removed",
        )


def build_checkout_layer(
    store: LayerStore, spec: CheckoutSpec, *, mirror: str = "", cache: LayerCache | None = None, force: bool = False
) -> Manifest:
    """Publish (once) the task layer of ``spec`` over its env layer (which must be in the store)."""
    key = spec.key()
    env_key = spec.env.key()
    store.require(env_key)

    def build(publish) -> Manifest:
        log: list[str] = [f"# swebox checkout layer {key}: {spec.env.source} at {spec.commit} over {env_key}"]
        with tempfile.TemporaryDirectory(prefix="swebox-checkout-") as tmp:
            repo, from_mirror = git_repository(spec.env, Path(tmp) / "clone.git", log, mirror)
            old = require_commit(repo, spec.env.commit, from_mirror=from_mirror)
            new = require_commit(repo, spec.commit, from_mirror=from_mirror)
            try:
                tar, written, deleted = changed_files(repo, old, target_tree(repo, new, spec.patch))
            except BuildFailure:
                for commit in (old, new):  # a mirror missing objects is the host's fault, said as such
                    require_objects(repo, commit, from_mirror=from_mirror)
                raise
            tag = nearest_tag(repo, new)
        paths = written + deleted
        log.append(
            f"# {len(written)} files written, {len(deleted)} deleted; "
            + (f"tagged {tag} (the nearest tag of {new[:12]})" if tag else f"no tag reaches {new[:12]}")
        )
        own_cache = cache is None
        node = cache or LayerCache(store, LayerCacheConfig())
        try:
            # pip may fetch build dependencies when the install commands run, like the env build
            settings = host_package_settings(spec.env.python) if spec.commands else PackageSettings()
            log.append(f"# the host's package settings: {', '.join(settings.sources) or 'none'}")
            # the interpreter and toolchain layers the env was built on go below it, as in every sandbox over the
            # env: its venv's python lives in its interpreter layer, and the commands run it
            under = env_toolchains(store, env_key)
            policy = SandboxPolicy(
                network="host" if spec.commands else "none",
                ro_binds=settings.binds,
                network_host_loopback=settings.loopback,
                env={
                    **DEFAULT_ENV,
                    **GIT_IDENTITY,
                    **settings.env,
                    **BUILD_PIP_ENV,
                    **toolchain_env(list(under.toolchains)),
                },
            )
            with ExitStack() as held:
                lowers = [held.enter_context(node.acquire(k)).path for k in [*under.layers.values(), env_key]]
                sb = held.enter_context(Sandbox(lowers, policy))
                write_files(sb, settings)
                old_objects = objects_before(sb, paths)  # with no paths: the env's commit object only
                sb.write_file("/swebox-checkout.tar", tar)
                rm = " ".join(shlex.quote(p) for p in deleted)
                run_step(
                    sb,
                    "cd /testbed && tar -xf /swebox-checkout.tar --no-same-owner && rm -f /swebox-checkout.tar"
                    + (f" && rm -f -- {rm}" if rm else ""),
                    "writing the starting tree",
                )
                message = f"swebox task start {spec.commit}"
                # committed before the commands run, as SWE-bench installs at a clean checkout of base_commit
                commit = _tag(sb, commit_paths(sb, message, paths), tag)
                for command in spec.commands:
                    log.append(f"$ {command}")
                    result = sb.exec(f"cd /testbed && . /venv/bin/activate && {command}", timeout=1800)
                    log.append(result.output.rstrip("\n"))
                    if result.exit_code != 0:
                        raise BuildFailure(
                            f"checkout layer {key}: `{command}` failed (exit {result.exit_code}):\n"
                            + "\n".join("\n".join(log).splitlines()[-40:]),
                            "\n".join(log),
                        )
                clean_keeping_tracked(sb)
                # what the commands changed in tracked or untracked-but-not-ignored files joins the commit
                status = run_step(
                    sb, "cd /testbed && git status --porcelain=v1 -z --untracked-files=all", "listing the changed files"
                )
                touched = sorted({e[3:] for e in status.split("\0") if len(e) > 3})
                if touched:
                    commit = _tag(sb, commit_paths(sb, message, touched), tag)
                removed = remove_unreachable(sb, old_objects)
                left = run_step(sb, "cd /testbed && git status --porcelain", "checking the tree is committed")
                if left.strip():
                    raise BuildFailure(f"checkout layer {key}: files left uncommitted: {left[:500]}")
                layer = sb.snapshot()
                include = ("testbed", "venv") if spec.commands else ("testbed",)
                return publish(
                    layer_dir=layer.path,
                    kind="task",
                    parent=env_key,
                    include=include,
                    log="\n".join(log) + "\n",
                    meta={
                        "checkout": spec.commit,
                        "commit": commit,
                        "removed_objects": removed,
                        "changed": len(paths),
                        "tag": tag,
                    },
                )
        finally:
            if own_cache:
                node.close()

    return store.build(key, build, force=force)


def checkout_from_dict(env: EnvSpec, data: dict[str, Any], patch: str = "") -> CheckoutSpec:
    """A CheckoutSpec from the ``{"commit", "commands"}`` a task keeps in its metadata."""
    return CheckoutSpec(
        env=env, commit=str(data.get("commit", "")), patch=patch, commands=tuple(data.get("commands", ()))
    )
