"""The environment synthesis works in: an env layer built (once) by the cache, and task layers stored there.

``CacheEnvironment(recipe, store, cache)`` builds or reuses the project's env layer in a LayerStore, holds it
(and the toolchain layers it was built on: a JavaScript env's node) materialised in a node-local LayerCache
while synthesis runs, starts sandboxes over them, and stores each
validated bug as a task layer (a new root commit with the buggy file, the clean objects removed).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from swebox.envs.cache import LayerCache, LayerCacheConfig, LayerStore
from swebox.envs.cache.builder import build_env
from swebox.envs.cache.task_layer import build_task_layer
from swebox.envs.cache.toolchains import env_toolchains, toolchain_env
from swebox.envs.sandbox import Sandbox, SandboxPolicy
from swebox.envs.sandbox.policy import DEFAULT_ENV
from swebox.envs.tasks.synth.recipe import ProjectRecipe

LAYERS_DIR = "layers"
"""Sub-folder of the synthesis output that holds the LayerStore (env and task layers)."""
SANDBOX_MEMORY_MB = 2048
"""Memory limit of a sandbox running a mutant: a runaway allocation is a rejected candidate, not an OOM."""


class CacheEnvironment:
    """One project's built environment; close() releases the materialised layer."""

    def __init__(self, recipe: ProjectRecipe, store: LayerStore, cache: LayerCache) -> None:
        self.recipe = recipe
        self.store = store
        self.cache = cache
        self.spec = recipe.env_spec()
        self.env_key = self.spec.key()
        build_env(store, self.spec)
        # the toolchain layers the env was built on go below it, and their PATH/NODE_PATH/GOROOT... into the
        # policy, as in episodes and grading: the mutants' tests run on the tools the env was built with
        under = env_toolchains(store, self.env_key)
        self.toolchains = under.layers
        self.handles = []
        try:
            for key in [*self.toolchains.values(), self.env_key]:  # one by one: close() frees what was held
                self.handles.append(cache.acquire(key))
        except BaseException:
            self.close()
            raise
        self.policy = SandboxPolicy(
            network="none",
            memory_mb=SANDBOX_MEMORY_MB,
            command_timeout_s=recipe.timeout_s + 60,
            env={**DEFAULT_ENV, **toolchain_env(tuple(under.toolchains))},
        )

    def sandbox(self) -> Sandbox:
        """A started sandbox over the toolchain layers (if any) and the env layer."""
        return Sandbox([h.path for h in self.handles], self.policy).start()

    def task_layer(self, changes: dict[str, bytes], message: str) -> tuple[str, str]:
        """Store the task layer of ``changes``; returns (layer key, the buggy snapshot's commit id)."""
        manifest = build_task_layer(self.store, self.env_key, changes, message, cache=self.cache)
        return manifest.key, str(manifest.meta.get("commit", ""))

    def close(self) -> None:
        handles, self.handles = self.handles, []
        for handle in handles:
            handle.release()


class CacheEnvironments:
    """Makes a CacheEnvironment per project over one store under ``out/layers``; closes them at the end."""

    def __init__(self, out: str | Path, fmt: str = "squashfs") -> None:
        self.store = LayerStore(Path(out) / LAYERS_DIR, fmt=fmt)
        self.cache = LayerCache(self.store, LayerCacheConfig())
        self._open: list[CacheEnvironment] = []

    def prepare(self, recipes: Sequence[ProjectRecipe], jobs: int) -> None:
        """Build the env layers of ``recipes`` that the store lacks, up to ``jobs`` at once, before synthesis
        takes the projects one by one: a build mostly waits on PyPI and on pip's one core. A failure is left
        for the project's own turn, which builds again (a recorded failure fails fast) and reports it."""
        with ThreadPoolExecutor(max(1, jobs), thread_name_prefix="synth-env") as pool:
            for build in [pool.submit(build_env, self.store, r.env_spec()) for r in recipes]:
                with contextlib.suppress(Exception):
                    build.result()

    def __call__(self, recipe: ProjectRecipe) -> CacheEnvironment:
        for env in self._open:  # one project at a time: release the previous one's layer
            env.close()
        self._open = [CacheEnvironment(recipe, self.store, self.cache)]
        return self._open[0]

    def close(self) -> None:
        for env in self._open:
            env.close()
        self._open = []
        self.cache.close()
