"""A Harbor environment provider backed by swebox sandboxes (harbor >= 0.25, Python >= 3.12).

``harbor run -p TASKS -a oracle --env swebox.envs.frameworks.harbor_env:SweboxEnvironment --ek store=STORE`` runs each
trial in a swebox sandbox instead of a Docker container: the task's ``environment/Dockerfile`` (or
``[environment].docker_image``) becomes its FROM image's layers plus one layer made rootless by
:mod:`swebox.envs.tasks.harbor_format.dockerfile` (built once per content, cached in the layer store), and every
trial starts a fresh overlay over them. Implements harbor 0.25's ``BaseEnvironment`` contract: ``start``,
``stop``, ``exec`` (bash, a fresh shell state per call as ``docker exec`` gives; ``cwd``, ``env``,
``timeout_sec``), ``upload_file``/``upload_dir``/``download_file``/``download_dir``, all async (the blocking
sandbox calls run in a worker thread). Environment kwargs (``--ek``): ``store`` (the layer store holding the
FROM images, default ``$SWEBOX_LAYER_STORE`` or ``runs/layers``), ``cache_root`` (the node cache folder).

Not supported, refused before start: a docker-compose environment, Windows tasks, GPUs/TPUs, network
allowlists, a non-root ``user``. Network: ``no-network`` is a sandbox without network, ``public`` outbound
through slirp4netns (the sandbox's ``user`` network).
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import secrets
import shlex
from pathlib import Path, PurePosixPath

try:
    from harbor.environments.base import BaseEnvironment, ExecResult
    from harbor.environments.capabilities import EnvironmentCapabilities
    from harbor.models.task.config import NetworkMode
except ImportError as exc:  # harbor needs Python >= 3.12; swebox's own tests run on 3.11 too
    raise ImportError(
        f"swebox.envs.frameworks.harbor_env: expected the harbor package (harbor 0.25, Python >= 3.12); found none "
        f"({exc}). Install it beside swebox: pip install 'harbor==0.25.0' (Python >= 3.12)."
    ) from exc
from swebox.envs.cache.images import acquire_image
from swebox.envs.episodes.layers_resolver import shared_cache
from swebox.envs.sandbox import Sandbox
from swebox.envs.tasks.harbor_format import dockerfile

ROOT_USERS = (None, "root", 0, "0")
MAX_FILE_BYTES = 1 << 30


class SweboxEnvironment(BaseEnvironment):
    """One Harbor trial's environment: a swebox sandbox over the task's layers."""

    def __init__(self, *args, store: str = "", cache_root: str = "", **kwargs) -> None:
        self._store_root = store or os.environ.get("SWEBOX_LAYER_STORE", "runs/layers")
        self._cache_root = cache_root
        self._sandbox: Sandbox | None = None
        self._held: list = []
        self._workdir = "/"
        super().__init__(*args, **kwargs)

    @staticmethod
    def type() -> str:
        return "swebox"

    @property
    def capabilities(self) -> EnvironmentCapabilities:
        return EnvironmentCapabilities(disable_internet=True)

    def _validate_definition(self) -> None:
        dockerfile_path = Path(self.environment_dir) / "Dockerfile"
        if not dockerfile_path.is_file() and not self.task_env_config.docker_image:
            raise FileNotFoundError(
                f"{self.environment_dir}: expected environment/Dockerfile or [environment].docker_image; found "
                "neither. swebox runs single-container tasks (no docker-compose)."
            )

    def _recipe(self) -> dockerfile.Recipe:
        path = Path(self.environment_dir) / "Dockerfile"
        if path.is_file():
            return dockerfile.parse(path.read_text(encoding="utf-8"), str(path))
        return dockerfile.Recipe(str(self.task_env_config.docker_image), [])

    def _network(self) -> str:
        return "none" if self.network_policy.network_mode == NetworkMode.NO_NETWORK else "user"

    def _start(self, force_build: bool) -> None:
        recipe = self._recipe()
        cache = shared_cache(self._store_root, self._cache_root)
        files = dockerfile.context_files(Path(self.environment_dir))
        key, workdir = dockerfile.build_layer(
            cache.store, cache, recipe, files, network=self._network(), repo=False, force=force_build
        )
        self._workdir = self.task_env_config.workdir or workdir
        held = acquire_image(cache, recipe.image)
        self._held.append(held)
        layer = cache.acquire(key)
        self._held.append(layer)
        policy = dataclasses.replace(held.policy, network=self._network())
        self._sandbox = Sandbox([*held.paths, str(layer.path)], policy).start()
        self._sh(f"mkdir -p {shlex.quote(self._workdir)} /logs/agent /logs/verifier /logs/artifacts", 60)

    async def start(self, force_build: bool) -> None:
        await asyncio.to_thread(self._start, force_build)

    def _stop(self) -> None:
        sandbox, self._sandbox = self._sandbox, None
        try:
            if sandbox is not None:
                sandbox.close()
        finally:
            held, self._held = self._held, []
            for handle in reversed(held):
                handle.release()

    async def stop(self, delete: bool) -> None:
        await asyncio.to_thread(self._stop)

    # -- exec ------------------------------------------------------------------------------------------
    def _box(self) -> Sandbox:
        if self._sandbox is None:
            raise RuntimeError("swebox environment: expected start() before use; found it not started.")
        return self._sandbox

    def _sh(self, command: str, timeout: float):
        result = self._box().exec(command, timeout=timeout)
        if result.exit_code != 0 or result.timed_out:
            raise RuntimeError(
                f"swebox environment: {command[:200]!r} failed (exit {result.exit_code}): {result.output[-1000:]}"
            )
        return result

    def _exec(
        self, command: str, cwd: str | None, env: dict[str, str] | None, timeout_sec: float | None, user
    ) -> ExecResult:
        if user not in ROOT_USERS:
            raise ValueError(
                f"swebox environment: expected user root (a sandbox's shell is uid 0 of its own "
                f"namespace); found {user!r}. Drop the task's [agent]/[verifier] user."
            )
        sb = self._box()
        err = f"/tmp/.swebox-exec-{secrets.token_hex(6)}.err"
        exports = "".join(f"export {k}={shlex.quote(str(v))}; " for k, v in (env or {}).items())
        # a subshell per call: cd, exports and shell options never leak into the next exec (as docker exec)
        script = f"cd {shlex.quote(cwd or self._workdir)} && {exports}bash -c {shlex.quote(command)}"
        result = sb.exec(f"( {script} ) 2>{err}", timeout=float(timeout_sec or 24 * 3600))
        if result.timed_out:
            raise RuntimeError(f"Command timed out after {timeout_sec} seconds")
        try:
            stderr = sb.read_file(err, max_bytes=64 << 20).decode("utf-8", errors="replace")
        except OSError:
            stderr = ""
        sb.exec(f"rm -f {err}", timeout=30)
        return ExecResult(stdout=result.output, stderr=stderr, return_code=result.exit_code)

    async def exec(
        self,
        command: str,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout_sec: int | None = None,
        user: str | int | None = None,
    ) -> ExecResult:
        return await asyncio.to_thread(
            self._exec, command, cwd, self._merge_env(env), timeout_sec, self._resolve_user(user)
        )

    # -- files -----------------------------------------------------------------------------------------
    def _upload_file(self, source: Path, target: str) -> None:
        self._sh(f"mkdir -p {shlex.quote(str(PurePosixPath(target).parent))}", 60)
        self._box().write_file(target, source.read_bytes(), source.stat().st_mode & 0o777)

    async def upload_file(self, source_path: Path | str, target_path: str) -> None:
        await asyncio.to_thread(self._upload_file, Path(source_path), target_path)

    def _upload_dir(self, source: Path, target: str) -> None:
        self._sh(f"mkdir -p {shlex.quote(target)}", 60)
        for path in sorted(source.rglob("*")):
            dest = str(PurePosixPath(target, path.relative_to(source).as_posix()))
            if path.is_dir() and not path.is_symlink():
                self._sh(f"mkdir -p {shlex.quote(dest)}", 60)
            elif path.is_symlink():
                self._sh(f"ln -sfn {shlex.quote(os.readlink(path))} {shlex.quote(dest)}", 60)
            elif path.is_file():
                self._upload_file(path, dest)

    async def upload_dir(self, source_dir: Path | str, target_dir: str) -> None:
        await asyncio.to_thread(self._upload_dir, Path(source_dir), target_dir)

    def _download_file(self, source: str, target: Path) -> None:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(self._box().read_file(source, max_bytes=MAX_FILE_BYTES))

    async def download_file(self, source_path: str, target_path: Path | str) -> None:
        await asyncio.to_thread(self._download_file, source_path, Path(target_path))

    def _download_dir(self, source: str, target: Path) -> None:
        listing = self._sh(
            f"cd {shlex.quote(source)} && find . -mindepth 1 \\( -type d -printf 'd %P\\0' \\) -o "
            "\\( -type f -printf 'f %P\\0' \\)",
            300,
        ).output
        target.mkdir(parents=True, exist_ok=True)
        for entry in filter(None, listing.split("\0")):
            kind, rel = entry[0], entry[2:]
            if kind == "d":
                (target / rel).mkdir(parents=True, exist_ok=True)
            else:
                self._download_file(str(PurePosixPath(source, rel)), target / rel)

    async def download_dir(self, source_dir: str, target_dir: Path | str) -> None:
        await asyncio.to_thread(self._download_dir, source_dir, Path(target_dir))
