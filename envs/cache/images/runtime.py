"""Running an image: its layers (plus the runtime layer) as the sandbox's stack, its config as the policy.

The image's rootfs replaces the host's: no system folders, no host /etc entries and no interpreters are bound
(a venv in the image points to the image's own Python, and binding the host's /usr/bin over it would break
it). The image's Env becomes the shell's environment, over the sandbox's usual non-PATH defaults, and its
WorkingDir the policy's ``workdir``; ``~/.bashrc`` (SWE-bench images activate their conda env there) is
sourced by the start script, which every new shell reads through BASH_ENV, so the env is active in the agent's
shell and in grading alike, after every reset. Entrypoint/Cmd are recorded but not run: the sandbox's own
shell takes their place.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from swebox.envs.sandbox import SandboxPolicy
from swebox.envs.sandbox.policy import DEFAULT_ENV

from ..layer_cache import LayerCache, LayerHandle
from ..store import LayerStore
from .records import START_SCRIPT, ImageRecord, require_image

ROOT_USERS = ("", "root", "0", "root:root", "0:0")


class ImageConfigError(ValueError):
    """An image's config asks for something the sandbox cannot give."""


def image_env(record: ImageRecord) -> dict[str, str]:
    """The shell's environment: the sandbox defaults (minus PATH, HOME and the locale, which the image may
    not have), then the image's Env."""
    env = {k: v for k, v in DEFAULT_ENV.items() if k not in ("PATH", "HOME", "LANG", "LC_ALL")}
    env["PATH"] = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"  # the OCI runtime default
    for item in record.config.get("Env") or []:
        name, sep, value = item.partition("=")
        if sep and name:
            env[name] = value
    env.setdefault("HOME", "/root")
    env["BASH_ENV"] = START_SCRIPT
    return env


def image_sandbox(record: ImageRecord, *, ignore_user: bool = False) -> dict[str, Any]:
    """The SandboxPolicy fields that run ``record`` (its rootfs, environment and working directory), as a
    plain dict: what ``EpisodeConfig(sandbox=...)`` takes, so episodes and grading run in the image."""
    user = str(record.config.get("User", ""))
    if user not in ROOT_USERS and not ignore_user:
        raise ImageConfigError(
            f"image {record.ref}: its config runs as user {user!r}; the agent of a sandbox is always uid 0 of "
            f"its own namespace. Use an image whose USER is root, or pass ignore_user=True to run it as root."
        )
    return {
        "system_paths": [],
        "etc_files": [],
        "auto_bind_interpreters": False,
        "ro_binds": [],
        "env": image_env(record),
        "workdir": record.config.get("WorkingDir") or "/",
    }


def image_policy(record: ImageRecord, base: SandboxPolicy | None = None, *, ignore_user: bool = False) -> SandboxPolicy:
    """``base`` (default: the default policy) made to run ``record``: its rootfs and its environment."""
    return SandboxPolicy.from_dict(
        {**(base or SandboxPolicy()).to_dict(), **image_sandbox(record, ignore_user=ignore_user)}
    )


@dataclass
class ImageLayers:
    """An image's layers held on this node: ``paths`` (lowest first) and ``policy`` go to Sandbox."""

    record: ImageRecord
    """The image."""
    policy: SandboxPolicy
    """The policy to start its sandboxes with."""
    handles: list[LayerHandle] = field(default_factory=list)
    """The node-local layers, lowest first."""

    @property
    def paths(self) -> list[str]:
        return [str(h.path) for h in self.handles]

    def release(self) -> None:
        for handle in self.handles:
            handle.release()
        self.handles = []

    def __enter__(self) -> ImageLayers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def acquire_image(
    cache: LayerCache, ref: str, base: SandboxPolicy | None = None, *, ignore_user: bool = False
) -> ImageLayers:
    """Materialise an image's layers on this node (once) and hold them; release when done."""
    store: LayerStore = cache.store
    record = require_image(store, ref)
    held = ImageLayers(record, image_policy(record, base, ignore_user=ignore_user))
    try:
        for key in record.stack():
            held.handles.append(cache.acquire(key))
            store.touch(key)
    except BaseException:
        held.release()
        raise
    return held
