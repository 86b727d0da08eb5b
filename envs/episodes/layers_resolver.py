"""Finding a task's layers on this node: its env layer and its own task layer, lowest first.

Layers come from a LayerStore (the packed, shared copy) through this node's LayerCache (mounted or unpacked
once per node, shared by every sandbox), or from a folder of plain layer folders named by key (what
``swebox tasks validate TASKS --layers DIR`` and the tests use). A layer that is not there is an error naming the key
and the exact command that builds it; an env layer is never built behind the caller's back, because a build
takes minutes and needs the network.
"""

from __future__ import annotations

import dataclasses
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from swebox.envs.cache import LayerCache, LayerCacheConfig, LayerHandle, LayerStore
from swebox.envs.cache.images import acquire_image, get_image, image_sandbox
from swebox.envs.cache.toolchains import ToolchainMissing, env_toolchains, toolchain_env
from swebox.envs.sandbox.policy import DEFAULT_ENV
from swebox.envs.sandbox.strict import strict_from_dict
from swebox.envs.tasks.schema import Task

DEFAULT_STORE = "runs/layers"
"""Same default as ``swebox cache``: $SWEBOX_LAYER_STORE, else this folder."""

_caches: dict[tuple[str, str], LayerCache] = {}
_caches_lock = threading.Lock()


class LayersMissing(LookupError):
    """A task's env or task layer is not in the layer store; the message says how to build it."""


IMAGE_KEYS = ("image", "image_name", "docker_image")
"""Where a task row names its image: ``metadata``'s keys (as SWE-smith's ``image_name`` and R2E-Gym's
``docker_image`` arrive), in this order."""


def image_of(task: Task) -> str:
    """The image a task row names ('' for none)."""
    return next((str(v) for v in (task.metadata.get(k, "") for k in IMAGE_KEYS) if v), "")


def task_images(tasks) -> dict[str, str]:
    """instance_id -> image name for the tasks that name one."""
    return {task.instance_id: image_of(task) for task in tasks if image_of(task)}


def store_beside(tasks_file: str | os.PathLike) -> str:
    """The layer store next to a task file (``swebox tasks synth --out DIR`` writes DIR/tasks.jsonl and
    DIR/layers), or '' when there is none."""
    if not tasks_file:
        return ""
    beside = Path(tasks_file).absolute().parent / "layers"
    return str(beside) if (beside / "manifests").is_dir() else ""


@dataclass
class LayerSource:
    """Where an environment finds the layers of its tasks. Travels as a plain dict (SkyRL kwargs, columns)."""

    store: str = ""
    """LayerStore folder ('' = $SWEBOX_LAYER_STORE, else the store beside ``tasks_file`` as `swebox tasks synth`
    leaves it, else runs/layers); ignored when ``dirs`` is set."""
    dirs: str = ""
    """Instead of a store: a folder holding unpacked layer folders named by env key and task layer key."""
    cache_root: str = ""
    """Node-local LayerCache folder ('' = $SWEBOX_LAYER_CACHE, else /var/tmp/swebox-layers-<uid>)."""
    cache_quota_gb: float = 50.0
    """Most GB of layers this node keeps materialised (least recently used ones without users go first)."""
    tasks_file: str = ""
    """The task file, named in the build command of a missing-layer error ('' shows a placeholder)."""

    def __post_init__(self) -> None:
        if self.cache_quota_gb <= 0:
            raise ValueError(f"LayerSource.cache_quota_gb: expected > 0 GB; found {self.cache_quota_gb}. Use e.g. 50.")
        if self.dirs and not Path(self.dirs).is_dir():
            raise ValueError(
                f"LayerSource.dirs: expected a folder of layer folders; found no folder at "
                f"{self.dirs!r}. Fix the path or use `store` instead."
            )

    @property
    def store_root(self) -> Path:
        """``store``, else $SWEBOX_LAYER_STORE, else the store beside ``tasks_file``, else runs/layers."""
        chosen = self.store or os.environ.get("SWEBOX_LAYER_STORE") or store_beside(self.tasks_file)
        return Path(chosen or DEFAULT_STORE).absolute()

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any] | LayerSource | None) -> LayerSource:
        return strict_from_dict(cls, data or {})


@dataclass
class TaskLayers:
    """A task's layers held for use. ``paths`` (lowest first) go to Sandbox and grade; release when done."""

    task_id: str
    """The task these layers belong to."""
    paths: list[Path]
    """Env layer first, then the task layer when the task has one."""
    handles: list[LayerHandle] = field(default_factory=list)
    """LayerCache handles keeping the layers materialised (empty for plain folders)."""
    sandbox: dict[str, Any] = field(default_factory=dict)
    """SandboxPolicy fields the task's container image needs (its rootfs, Env, WorkingDir); {} otherwise."""
    env: dict[str, str] = field(default_factory=dict)
    """Environment variables of the toolchain layers under the env layer (``cache.toolchains``), over the
    sandbox's own; {} for an env without toolchains."""

    def configure(self, config: Any) -> Any:
        """``config`` (an EpisodeConfig) with the image's sandbox fields over its own, and the toolchains'
        environment over its environment, when there are any."""
        if not self.sandbox and not self.env:
            return config
        sandbox = {**config.sandbox, **self.sandbox}
        if self.env:
            sandbox["env"] = {**(sandbox.get("env") or DEFAULT_ENV), **self.env}
        return dataclasses.replace(config, sandbox=sandbox)

    def release(self) -> None:
        """Let the node cache evict the layers again; safe to call twice."""
        handles, self.handles = self.handles, []
        for handle in handles:
            handle.release()

    def __enter__(self) -> TaskLayers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def shared_cache(store_root: str | Path, cache_root: str = "", quota_gb: float = 50.0) -> LayerCache:
    """One LayerCache per (store, node folder) per process: mounts and locks are shared by all episodes.

    Never closed by the episodes: closing would unmount squashfs layers that the next episode mounts again.
    """
    config = LayerCacheConfig(root=cache_root, quota_gb=quota_gb)
    key = (str(Path(store_root).absolute()), config.root)
    with _caches_lock:
        cache = _caches.get(key)
        if cache is None:
            cache = _caches[key] = LayerCache(LayerStore(key[0]), config)
        return cache


def build_command(source: LayerSource) -> str:
    """The command that builds the env layers of the task file into the configured store."""
    tasks = source.tasks_file or "TASKS.jsonl"
    return f"swebox cache --store {source.store_root} build --tasks {tasks}"  # --store belongs to `cache`


def _layer_keys(task: Task) -> list[tuple[str, str]]:
    if task.env is None:
        raise LayersMissing(
            f"task {task.instance_id}: expected an 'env' spec naming its environment; found "
            "none. Add the env (an EnvSpec dict) to the task row, e.g. with `swebox tasks synth`."
        )
    keys = [("env", task.env_key)]
    if task.task_layer_key:
        keys.append(("task", task.task_layer_key))
    return keys


def _missing(task: Task, kind: str, key: str, where: str, source: LayerSource) -> LayersMissing:
    if kind == "env":
        how = f"build it with:\n    {build_command(source)}"
        what = f"its environment {key} ({task.env.source if task.env else '?'})"
    elif isinstance(task.metadata.get("checkout"), dict):  # a dataset row's starting tree
        how = (
            f"build it with:\n    {build_command(source)} --git-mirror DIR  (or $SWEBOX_GIT_MIRROR; online: no mirror)"
        )
        what = f"its starting tree {key} (commit {task.metadata['checkout'].get('commit', '?')})"
    else:
        how = (
            "task layers are made with the task by `swebox tasks synth --project NAME==VERSION --out DIR` "
            "(they live in DIR/layers); "
            "copy them with `swebox cache import --from DIR/layers`"
        )
        what = f"its task layer {key}"
    return LayersMissing(f"task {task.instance_id}: {what} is missing from the layer cache {where}; {how}")


def _check_store(root: Path) -> None:
    if not (root / "manifests").is_dir():
        raise LayersMissing(
            f"layer store {root}: expected a folder made by `swebox cache build` or `swebox "
            "tasks synth` (with manifests/); found none. Give the store: --layers (swebox eval, "
            "tasks validate), env.layer_store=... (swebox train, sft) or $SWEBOX_LAYER_STORE."
        )


def _resolve(task: Task, source: LayerSource) -> tuple[str, list[tuple[str, str]]]:
    """What the task runs on: its container image ('' for none) and the (kind, key) layers to hold above it,
    each one checked present, or LayersMissing saying how to make it. A task whose row names an image runs in
    it when the store has the image (or the task has no env); layer dirs (``source.dirs``) hold no images."""
    if source.dirs:
        keys = _layer_keys(task)
        for kind, key in keys:
            if not (Path(source.dirs) / key).is_dir():
                raise _missing(task, kind, key, source.dirs, source)
        return "", keys
    image = image_of(task)
    if not image:
        _layer_keys(task)  # a task with neither image nor env: its own error comes before the store's
    _check_store(source.store_root)
    store = LayerStore(source.store_root)
    if image and (get_image(store, image) is not None or task.env is None):
        if get_image(store, image) is None:
            raise LayersMissing(
                f"task {task.instance_id}: its image {image} is not in the layer store "
                f"{source.store_root}; pull it with:\n    swebox cache pull {image} --store "
                f"{source.store_root}\n(or `{build_command(source)} --env-source image`)"
            )
        keys = [("task", task.task_layer_key)] if task.task_layer_key else []
    else:
        image, keys = "", _layer_keys(task)
    for kind, key in keys:
        if store.get(key) is None:
            raise _missing(task, kind, key, str(source.store_root), source)
    return image, _with_toolchains(store, keys)


def _with_toolchains(store: LayerStore, keys: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """``keys`` with the interpreter and toolchain layers an env layer was built on (its manifest names them)
    below it: kinds ``python:NAME`` and ``toolchain:NAME`` (only the toolchains bring environment variables)."""
    out: list[tuple[str, str]] = []
    for kind, key in keys:
        if kind == "env":
            try:
                under = env_toolchains(store, key)
            except ToolchainMissing as exc:
                raise LayersMissing(str(exc)) from None
            out.extend(("python:" + name, python_key) for name, python_key in under.interpreter.items())
            out.extend(("toolchain:" + name, tool_key) for name, tool_key in under.toolchains.items())
        out.append((kind, key))
    return out


def missing_layers(task: Task, source: LayerSource | None = None) -> LayersMissing | None:
    """Why the task's layers cannot be acquired on this node (its store lacks one), or None when they can;
    nothing is materialised: what a trainer checks for every task before its first step."""
    source = source or LayerSource()
    try:
        _resolve(task, source)
    except LayersMissing as exc:
        return exc
    return None


def acquire_layers(task: Task, source: LayerSource | None = None) -> TaskLayers:
    """The task's layer folders on this node, held until :meth:`TaskLayers.release` (an image's layers first
    when the task runs in the image its row names: ``_resolve``)."""
    source = source or LayerSource()
    image, keys = _resolve(task, source)  # every layer is there before any is materialised
    if source.dirs:
        return TaskLayers(task.instance_id, [Path(source.dirs) / key for _, key in keys])
    cache = shared_cache(source.store_root, source.cache_root, source.cache_quota_gb)
    if image:
        held = acquire_image(cache, image)
        layers = TaskLayers(
            task.instance_id, [Path(p) for p in held.paths], list(held.handles), image_sandbox(held.record)
        )
    else:
        layers = TaskLayers(task.instance_id, [])
    tools = [kind.split(":", 1)[1] for kind, _ in keys if kind.startswith("toolchain:")]
    layers.env = toolchain_env(tools)
    try:
        for _, key in keys:
            handle = cache.acquire(key)
            layers.handles.append(handle)
            layers.paths.append(handle.path)
    except BaseException:
        layers.release()
        raise
    return layers


def close_shared_caches() -> None:
    """Release and unmount what the shared caches hold (end of a process or of a test)."""
    with _caches_lock:
        caches = list(_caches.values())
        _caches.clear()
    for cache in caches:
        cache.close()
