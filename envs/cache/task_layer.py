"""Build a task layer: only what differs from the env layer (a bug patch is a few KB, not another repo).

Started over the env layer, a sandbox gets the changed files, then a NEW ROOT commit of the changed tree on
``main`` (no parent: nothing links back to the clean snapshot), and the loose objects of the old commit, of
the old trees along changed paths and of the old blobs of changed files are deleted. The snapshot of that
sandbox holds the new files, the new objects and overlay whiteouts over the old ones, so nothing inside a
task's sandbox holds the original version. Objects the new tree still uses (an unchanged copy of an old
blob elsewhere) are kept.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import shlex
from collections.abc import Mapping

from ..sandbox import Sandbox, SandboxPolicy
from ..sandbox.policy import DEFAULT_ENV
from .build_commands import GIT_IDENTITY
from .layer_cache import LayerCache, LayerCacheConfig
from .manifest import Manifest
from .store import BuildFailure, LayerStore

_PATH_LIST = "/tmp/swebox-commit-paths"
"""Where :func:`commit_paths` writes the NUL-separated paths it commits (outside /testbed, not in the layer)."""


def _check_path(path: str) -> str:
    norm = posixpath.normpath(path)
    if path.startswith("/") or norm.startswith("..") or norm in (".", "") or ".git" in norm.split("/"):
        raise ValueError(f"build_task_layer: expected a path relative to /testbed outside .git; found {path!r}.")
    return norm


def task_layer_key(env_key: str, changes: Mapping[str, bytes | None], message: str) -> str:
    """``"task-"`` + 20 hex of sha256 over the env key, each changed path's content hash, and the message."""
    body = {
        "env": env_key,
        "message": message,
        "changes": {p: (None if d is None else hashlib.sha256(d).hexdigest()) for p, d in sorted(changes.items())},
    }
    return "task-" + hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:20]


def _ancestors(path: str) -> list[str]:
    """'a/b/c.py' -> ['', 'a', 'a/b']: the trees that change when c.py changes ('' is the root tree)."""
    parts = path.split("/")[:-1]
    return [""] + ["/".join(parts[: i + 1]) for i in range(len(parts))]


def run_step(sb: Sandbox, command: str, what: str) -> str:
    """Run one step of a layer build in ``sb``; its output, or BuildFailure naming ``what`` (also checkout.py's)."""
    result = sb.exec(command, timeout=300)
    if result.exit_code != 0:
        raise BuildFailure(
            f"task layer: {what} failed (exit {result.exit_code}): {result.output[-1500:]}", result.output
        )
    return result.output


def objects_before(sb: Sandbox, paths: list[str]) -> set[str]:
    """The ids of HEAD's commit and of its trees and blobs along ``paths``: what a new commit may orphan."""
    specs = ["HEAD"] + [f"HEAD:{d}" if d else "HEAD^{tree}" for p in paths for d in _ancestors(p)]
    specs += [f"HEAD:{p}" for p in paths]
    out = run_step(
        sb,
        "cd /testbed && printf '%s\\n' "
        + " ".join(map(shlex.quote, specs))
        + " | git cat-file --batch-check='%(objectname) %(objecttype)'",
        "listing the old objects",
    )
    return {line.split()[0] for line in out.splitlines() if line and not line.endswith("missing")}


def _apply(sb: Sandbox, changes: Mapping[str, bytes | None]) -> None:
    for path, data in changes.items():
        target = f"/testbed/{path}"
        if data is None:
            run_step(sb, f"rm -f {shlex.quote(target)}", f"deleting {path}")
        else:
            run_step(sb, f"mkdir -p {shlex.quote(posixpath.dirname(target))}", f"creating the folder of {path}")
            sb.write_file(target, data)


def commit_paths(sb: Sandbox, message: str, paths: list[str]) -> str:
    """Commit ``paths`` as they are now onto main, with no parent (the layer's root commit); its id."""
    # Only the changed paths: `git add -A` would re-hash every file whose stat differs in the sandbox and
    # "freshen" (touch) each existing object, copying the whole object store up into the task layer.
    # Not `git add -- PATHS` either: paths are pathspecs there (`[`, `*`, `?` are globs; sphinx's test roots
    # have such names) and a file the repository tracks but its .gitignore ignores (pylint's
    # `tests/.pylint_primer_tests/.gitkeep`) is refused or, once deleted, "did not match any files".
    # `update-index --add --remove -z --stdin` takes each path literally, adds what exists whatever the ignore
    # rules say, drops what does not, and is quiet about a path neither in the index nor on disk.
    # No paths (a checkout whose tree is the env's): nothing to add, the index already holds the tree.
    if paths:
        sb.write_file(_PATH_LIST, b"\0".join(p.encode("utf-8", "surrogateescape") for p in paths) + b"\0")
    add = f"git update-index --add --remove -z --stdin < {_PATH_LIST} && rm -f {_PATH_LIST} && " if paths else ""
    out = run_step(
        sb,
        f"cd /testbed && {add}tree=$(git write-tree) && "
        f"c=$(printf '%s' {shlex.quote(message)} | git commit-tree $tree) && "
        "git update-ref refs/heads/main $c && echo $c",
        "committing the task state",
    )
    return out.split()[-1]


def remove_unreachable(sb: Sandbox, old: set[str]) -> int:
    """Delete the loose objects of ``old`` that main no longer reaches; how many went."""
    live = run_step(sb, "cd /testbed && git rev-list --objects main", "listing the new objects")
    doomed = sorted(old - {line.split()[0] for line in live.splitlines() if line})
    if not doomed:
        return 0
    files = " ".join(f".git/objects/{sha[:2]}/{sha[2:]}" for sha in doomed)
    run_step(
        sb,
        f"cd /testbed && for f in {files}; do "
        f"test -f $f || {{ echo \"not loose: $f\"; exit 3; }}; done && "
        f"rm -f {files}",
        "removing the old objects (the env layer must keep them loose)",
    )
    return len(doomed)


def build_task_layer(
    store: LayerStore,
    env_key: str,
    changes: Mapping[str, bytes | None],
    message: str,
    *,
    cache: LayerCache | None = None,
    force: bool = False,
) -> Manifest:
    """Publish (once) the task layer holding ``changes`` (paths under /testbed; None deletes) over the env
    layer ``env_key``; its key is :func:`task_layer_key`."""
    if not changes:
        raise ValueError("build_task_layer: expected at least one changed file; found none.")
    changes = {_check_path(p): d for p, d in changes.items()}
    key = task_layer_key(env_key, changes, message)
    store.require(env_key)

    def build(publish) -> Manifest:
        own_cache = cache is None
        node = cache or LayerCache(store, LayerCacheConfig())
        try:
            policy = SandboxPolicy(env={**DEFAULT_ENV, **GIT_IDENTITY})
            with node.acquire(env_key) as env, Sandbox([env.path], policy) as sb:
                old = objects_before(sb, list(changes))
                _apply(sb, changes)
                commit = commit_paths(sb, message, list(changes))
                removed = remove_unreachable(sb, old)
                status = run_step(sb, "cd /testbed && git status --porcelain", "checking the tree is committed")
                if status.strip():
                    raise BuildFailure(f"task layer {key}: files left uncommitted: {status[:500]}")
                layer = sb.snapshot()
                return publish(
                    layer_dir=layer.path,
                    kind="task",
                    parent=env_key,
                    include=("testbed",),
                    meta={"message": message, "commit": commit, "removed_objects": removed, "changed": sorted(changes)},
                )
        finally:
            if own_cache:
                node.close()

    return store.build(key, build, force=force)
