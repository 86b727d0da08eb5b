"""Joining a Ray cluster from the trainer: loopback clusters, a deadline, and paths that mean the same on the actors.

- **Loopback.** A cluster of scripts/ray_head.sh on its default ``--ip 127.0.0.1`` runs with
  ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` (everything bound to 127.0.0.1). A driver without that variable turns
  ``127.0.0.1:6379`` into the machine's network address and waits there for ever (measured with Ray 2.60: it
  retried ``192.0.2.2:6379`` for more than ten minutes), so for a loopback address the trainer sets it itself.
- **A deadline.** Ray retries an unreachable head for a long time; the trainer gives up after
  ``ray.connect_timeout_s`` with one line saying what it tried and what to check.
- **Paths.** Rollout actors run in the folder their node was started from, not in the trainer's: a relative
  ``env.tasks`` or ``env.layer_store`` would name another file there (preflight then fails on every task). The
  driver makes every path the actors use absolute before the config leaves it (:func:`absolute_paths`).
"""

from __future__ import annotations

import dataclasses
import os
import socket
import threading
import time
from pathlib import Path
from typing import Any

CLUSTER_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
PATH_ENV = ("SWEBOX_LAYER_STORE", "SWEBOX_LAYER_CACHE")
"""Environment variables holding paths that the rollout actors are given (ray_cluster.FORWARDED_ENV)."""


class ConnectError(RuntimeError):
    """The cluster at ``ray.address`` could not be joined in time; the message is one line saying what to check."""


def is_loopback(address: str) -> bool:
    """True for ``127.x.y.z:PORT`` and ``localhost:PORT`` (a cluster on this machine only)."""
    host = address.rpartition(":")[0] if ":" in address else address
    return host == "localhost" or host.startswith("127.")


def use_loopback() -> None:
    """Make this process's Ray keep loopback addresses (as scripts/ray_head.sh's nodes do), also when Ray was
    imported before the variable was set (Ray reads it once, at import)."""
    os.environ[CLUSTER_ENV] = "0"
    try:
        import ray._private.ray_constants as constants
    except ImportError:  # no Ray here: the pool says so, with how to install it
        return
    constants.ENABLE_RAY_CLUSTER = False


def _wait_for_port(address: str, deadline: float, timeout_s: float) -> None:
    host, _, port = address.rpartition(":")
    last: OSError | None = None
    while time.monotonic() < deadline:
        try:
            socket.create_connection((host, int(port)), timeout=min(2.0, max(0.1, deadline - time.monotonic()))).close()
            return
        except OSError as exc:
            last = exc
            time.sleep(0.5)
    why = last.strerror if last is not None and last.strerror else last
    raise ConnectError(
        f"ray.address={address}: expected a Ray head listening there; found nothing within "
        f"ray.connect_timeout_s={timeout_s:g} ({why}); start one with scripts/ray_head.sh (it "
        "prints the address), or check the address"
    )


def connect(address: str, timeout_s: float, **init_args: Any) -> None:
    """``ray.init(address=...)`` within ``timeout_s`` seconds, or :class:`ConnectError`."""
    import ray

    deadline = time.monotonic() + timeout_s
    if is_loopback(address):
        use_loopback()
    host_port = address.rpartition(":")[2].isdigit() and address != "auto"
    if host_port:
        _wait_for_port(address, deadline, timeout_s)
    failed: list[BaseException] = []

    def join() -> None:
        try:
            ray.init(address=address, **init_args)
        except BaseException as exc:  # reported on the caller's thread
            failed.append(exc)

    # ray.init cannot be interrupted; on a thread of its own the trainer can stop waiting (the process then ends)
    joining = threading.Thread(target=join, name="swebox-ray-connect", daemon=True)
    joining.start()
    joining.join(max(0.0, deadline - time.monotonic()))
    if joining.is_alive():
        hint = "" if is_loopback(address) else "; a head started on 127.0.0.1 is reached as 127.0.0.1:PORT only"
        raise ConnectError(
            f"ray.address={address}: the head answers but Ray did not let the trainer join within "
            f"ray.connect_timeout_s={timeout_s:g}; check that the address is the one "
            f"scripts/ray_head.sh printed and that this machine can reach every node{hint}"
        )
    if failed:
        exc = failed[0]
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise ConnectError(f"ray.address={address}: could not join the cluster: {first}") from exc


def absolute_paths(cfg: Any) -> Any:
    """``cfg`` with the paths rollout actors open made absolute from this (the driver's) working folder:
    ``env.tasks``, ``env.layer_store``, ``env.cache_dir``, and ``model.path``/``model.tokenizer`` when they name
    a local folder. Also the PATH_ENV variables of this process, which the actors get."""

    def absolute(value: str) -> str:
        return str(Path(value).absolute()) if value and not Path(value).is_absolute() else value

    for name in PATH_ENV:
        if os.environ.get(name):
            os.environ[name] = absolute(os.environ[name])
    env = dataclasses.replace(
        cfg.env,
        tasks=absolute(cfg.env.tasks),
        layer_store=absolute(cfg.env.layer_store),
        cache_dir=absolute(cfg.env.cache_dir),
    )
    model = cfg.model
    for field in ("path", "tokenizer"):
        value = getattr(model, field)
        if value and Path(value).exists():  # a local folder, not a hub name or 'builtin'
            model = dataclasses.replace(model, **{field: absolute(value)})
    return dataclasses.replace(cfg, env=env, model=model)
