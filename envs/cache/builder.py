"""Build an env layer from an EnvSpec inside a sandbox, and publish it to a LayerStore.

The env layer layout (docs/cache.md, contracts): ``/testbed`` is the repository at the snapshot with a
``.git`` of exactly one root commit on ``main`` (no remotes, no other refs, no reflog, loose objects only);
``/venv`` is a virtualenv created at that path inside the build sandbox (so its shebangs are right) with the
project installed; ``/swebox/env.json`` and ``/swebox/build.log`` record how. No test caches anywhere and no
bytecode of the project (a .pyc of the clean source would leak the fix of a synthesised bug); the venv's
third-party code is byte-compiled, so grades stop recompiling pytest and its dependencies.

Only the build step has network (``SandboxPolicy(network="user")``: slirp4netns, never the host's network
namespace). The interpreter is an interpreter layer (:mod:`.pythons`, at ``/opt/swebox/python/X.Y``): the one
the spec pins (``EnvSpec.interpreter``), else the store's newest of the spec's version, else the host's
install of it imported as a layer first (reachable or not: an env bound to a host path would need that path on
every node). The venv's ``pyvenv.cfg`` names the layer's path and the manifest names the layer in
``meta["toolchains"]``, so every sandbox over the env stacks it below (``BuilderConfig.python_layers``
chooses). Only a system interpreter (``/usr/bin/python3.X``, which cannot become a layer: its files are spread
over ``/usr``, bound into every sandbox anyway) or ``python_layers="never"`` binds the host's interpreter
read-only at its host path: the builder records that prefix in the manifest (``meta["interpreters"]``) and the
node cache writes it beside the layer folder, so later sandboxes bind it; the layer's own tree (written by the
spec's untrusted setup code) is never read for it.

An env layer whose spec does not pin the interpreter is keyed by the spec alone, so the builder checks a layer
the store already has against the interpreter it would build on now (:func:`interpreter_identity`): another
one (another patch release, another build of the same version) raises :class:`InterpreterMismatch` rather than
reuse an env made for a different interpreter.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..sandbox import Layer, Sandbox, SandboxPolicy
from ..sandbox.policy import DEFAULT_ENV
from .build_commands import BUILD_PIP_ENV, CLEAN_STEP, COMPILE_THIRD_PARTY, GIT_IDENTITY, ONE_COMMIT, venv_command
from .interpreters import Interpreter, find_interpreter
from .manifest import BUILDER_VERSION, Manifest
from .pip_settings import PackageSettings, host_package_settings, write_files
from .pythons import SYSTEM_PREFIXES, find_python_layer, import_python, layer_name, layer_prefix
from .sources import fetch_source
from .spec import EnvSpec
from .store import BuildFailure, LayerStore
from .toolchain_specs import CACHE_ROOT
from .toolchains import held_layer, toolchain_env, toolchain_layer

ENV_LAYER_ENTRIES = ("testbed", "venv", "swebox")


@dataclass
class BuilderConfig:
    """Limits of one env build."""

    work_dir: str = ""
    """Host folder for sources and downloads ('' = /var/tmp); readable by others and not under /tmp, which
    every sandbox replaces with its own."""
    step_timeout_s: float = 1800.0
    """Wall-clock limit of each build command (pip install of a large project can take minutes)."""
    memory_mb: int = 8192
    """Memory limit of the build sandbox."""
    upper_size_mb: int = 8192
    """Size of the build sandbox's writable layer: the venv and repository must fit."""
    log_tail_lines: int = 40
    """Lines of the build log quoted in errors."""
    python_layers: str = "auto"
    """Where the env's interpreter comes from (a spec that pins ``interpreter`` always gets that layer).
    "auto": the store's interpreter layer of the spec's version when it has one, else a layer imported from the
    host's install, else (a system interpreter of ``/usr``, which cannot be a layer) the host's install bound at
    its path. "always": a layer, or an error where the host's install cannot become one. "never": the host's
    install, bound."""

    def __post_init__(self) -> None:
        if self.python_layers not in ("auto", "always", "never"):
            raise ValueError(
                f"BuilderConfig.python_layers: expected 'auto', 'always' or 'never'; found {self.python_layers!r}."
            )
        if self.step_timeout_s <= 0:
            raise ValueError(f"BuilderConfig.step_timeout_s: expected > 0; found {self.step_timeout_s}.")


class EnvBuildError(BuildFailure):
    """A build step failed because of the spec (install, test-runner check)."""


class InterpreterMismatch(RuntimeError):
    """The store's env layer of a spec was built on another interpreter than the one the build would use now."""


class _Steps:
    """Runs build commands in the sandbox, logging each; the first failure raises with the log tail."""

    def __init__(self, sb: Sandbox, key: str, log: list[str], config: BuilderConfig) -> None:
        self.sb, self.key, self.log, self.config = sb, key, log, config

    def run(self, command: str, what: str, spec_fault: bool = True) -> str:
        """``spec_fault``: a failure is the spec's (recorded as failed) rather than the host's."""
        self.log.append(f"$ {command}")
        result = self.sb.exec(command, timeout=self.config.step_timeout_s)
        self.log.append(result.output.rstrip("\n"))
        if result.timed_out or result.exit_code != 0:
            why = "timed out" if result.timed_out else f"exit {result.exit_code}"
            text = "\n".join(self.log)
            tail = "\n".join(text.splitlines()[-self.config.log_tail_lines :])
            message = f"env {self.key}: {what} failed ({why}): `{command}`\n--- last lines of the build log ---\n{tail}"
            raise EnvBuildError(message, text) if spec_fault else RuntimeError(message)
        return result.output


@dataclass(frozen=True)
class _Python:
    """The env build's interpreter: the host's, or an interpreter layer's (``layer_key`` set)."""

    interp: Interpreter
    """Its paths as the build sandbox sees them."""
    layer_key: str = ""
    """The interpreter layer's key ('' for the host's install, bound)."""

    @property
    def identity(self) -> str:
        """What the env is built on: the interpreter layer's key (a hash of its tree), or the host's binary and
        version ('host:/usr/bin/python3.11@3.11.2')."""
        return self.layer_key or f"host:{self.interp.path}@{self.interp.version}"


def interpreter_identity(manifest: Manifest) -> str:
    """The interpreter an env layer was built on, as :attr:`_Python.identity` names it (from its manifest)."""
    meta = manifest.meta
    return meta.get("python_layer") or f"host:{meta.get('interpreter', '?')}@{meta.get('python', '?')}"


def _pinned(store: LayerStore, spec: EnvSpec, config: BuilderConfig) -> Manifest:
    if config.python_layers == "never":
        raise ValueError(
            f"env {spec.key()}: expected python_layers 'auto' or 'always' for a spec that pins the interpreter "
            f"layer {spec.interpreter}; found 'never'. Drop --python-layers never, or the spec's interpreter."
        )
    manifest = store.get(spec.interpreter)
    if manifest is None or manifest.kind != "python":
        raise RuntimeError(
            f"env {spec.key()}: expected the interpreter layer {spec.interpreter} in the store {store.root}; "
            f"found {'none' if manifest is None else 'a ' + manifest.kind + ' layer'}. Import the install it was "
            f"made from: swebox cache --store {store.root} python import PREFIX (`python list` shows the keys)."
        )
    return manifest


def _python(store: LayerStore, spec: EnvSpec, config: BuilderConfig) -> _Python:
    if spec.interpreter:
        manifest: Manifest | None = _pinned(store, spec, config)
    else:
        manifest = find_python_layer(store, spec.python) if config.python_layers != "never" else None
    if manifest is None and config.python_layers != "never":
        host = find_interpreter(spec.python)
        # a reachable install is imported too: bound at its host path, the env would need that path on every
        # node, and which interpreter a spec gets would depend on the host's folders' modes
        if config.python_layers == "always" or host.prefix not in SYSTEM_PREFIXES:
            manifest = import_python(store, host.path, work_dir=config.work_dir or "/var/tmp")
    if manifest is None:
        return _Python(_interpreter(spec))
    version = manifest.meta["version"]
    minor = ".".join(version.split(".")[:2])
    prefix = layer_prefix(minor)
    return _Python(Interpreter(f"{prefix}/bin/python{minor}", version, prefix, True), manifest.key)


def _interpreter(spec: EnvSpec) -> Interpreter:
    interp = find_interpreter(spec.python)
    if not interp.reachable:
        raise RuntimeError(
            f"Python {interp.version} at {interp.path} lies under a folder that other users cannot enter, so "
            f"the sandbox's unprivileged root cannot run it; install Python {spec.python} under a readable "
            f"prefix (e.g. `UV_PYTHON_INSTALL_DIR=/opt/python uv python install {spec.python}`, found there) or "
            f"make its parent folders o+x."
        )
    return interp


def build_policy(
    src_root: Path,
    interp: Interpreter,
    config: BuilderConfig,
    settings: PackageSettings | None = None,
    toolchains: tuple[str, ...] = (),
    bind_interpreter: bool = True,
) -> SandboxPolicy:
    """The env build's sandbox: network, the sources and the interpreter bound (unless it comes from an
    interpreter layer: ``bind_interpreter=False``), the host's package settings (:mod:`.pip_settings`) in its
    environment (the builder's own pip settings win), and the environment of the spec's toolchain layers."""
    settings = settings or PackageSettings()
    env = {**DEFAULT_ENV, **GIT_IDENTITY, **settings.env, **BUILD_PIP_ENV, **toolchain_env(toolchains)}
    return SandboxPolicy(
        network="user",
        network_host_loopback=settings.loopback,
        ro_binds=(str(src_root), *([interp.prefix] if bind_interpreter else []), *settings.binds),
        memory_mb=config.memory_mb,
        upper_size_mb=config.upper_size_mb,
        command_timeout_s=config.step_timeout_s,
        env=env,
    )


def build_env(
    store: LayerStore, spec: EnvSpec, *, config: BuilderConfig | None = None, force: bool = False, mirror: str = ""
) -> Manifest:
    """The env layer of ``spec``: reused when the store has it, else built once (across processes).
    ``mirror``: a git mirror folder GitHub sources are read from (see :mod:`.sources`)."""
    config = config or BuilderConfig()
    key = spec.key()
    # chosen before the store is asked: a layer it has is reused only when built on this same interpreter
    python = _python(store, spec, config)

    def build(publish) -> Manifest:
        interp = python.interp
        tools = [toolchain_layer(name, store.root) for name in spec.toolchains]  # built once, held
        under = [held_layer(python.layer_key, store.root)] if python.layer_key else []
        log = [
            f"# swebox env build {key} (builder {BUILDER_VERSION}), python {interp.version} at {interp.path}"
            + (f" (interpreter layer {python.layer_key})" if python.layer_key else ""),
            f"# spec {spec.canonical_json()}",
        ]
        work_dir = config.work_dir or "/var/tmp"
        with tempfile.TemporaryDirectory(prefix=f"swebox-build-{key}-", dir=work_dir) as tmp:
            os.chmod(tmp, 0o755)  # the build sandbox's unprivileged root reads the sources through a bind
            src, base = Path(tmp) / "src", Path(tmp) / "base"
            fetch_source(spec, src, log, mirror)
            base.mkdir()  # an empty lowest layer: everything the build writes lands in the snapshot
            settings = host_package_settings(interp.version)
            log.append(f"# the host's package settings: {', '.join(settings.sources) or 'none'}")
            policy = build_policy(src, interp, config, settings, spec.toolchains, not python.layer_key)
            with Sandbox([*under, *tools, base], policy) as sb:
                write_files(sb, settings)
                steps = _Steps(sb, key, log, config)
                # not cp -a: the bound sources belong to unmapped host ids, which cannot be preserved
                steps.run(
                    f"cp -R --preserve=mode,links {shlex.quote(str(src))} /testbed && mkdir -p /swebox"
                    + (f" {CACHE_ROOT}" if tools else ""),
                    "copying the source",
                    spec_fault=False,
                )
                steps.run(venv_command(interp, spec), "creating the venv", spec_fault=False)
                activate = "cd /testbed && . /venv/bin/activate && "
                for command in spec.install:
                    steps.run(activate + command, "install")
                if spec.test_deps:
                    steps.run(
                        activate + "pip install " + " ".join(map(shlex.quote, spec.test_deps)),
                        "installing test dependencies",
                    )
                for command in spec.setup:
                    steps.run(activate + command, "setup command")
                if any(re.match(r"pytest(?![\w.-])", d.strip()) for d in spec.test_deps):
                    # swebox's own grader runs pytest; recipes of other harnesses (Django's runtests.py,
                    # sympy's bin/test) bring their own runner, so there is nothing to check for them
                    steps.run(activate + "python -m pytest --version", "the test runner check (pytest imports)")
                freeze = steps.run(activate + "pip freeze --all", "pip freeze")
                steps.run(CLEAN_STEP, "removing caches and bytecode", spec_fault=False)
                steps.run(
                    f"/venv/bin/python -I -c {shlex.quote(COMPILE_THIRD_PARTY)}",
                    "byte-compiling third-party code",
                    spec_fault=False,
                )
                steps.run(ONE_COMMIT, "making the one-commit git history", spec_fault=False)
                info = {
                    "spec": spec.to_dict(),
                    "key": key,
                    "python": interp.version,
                    "interpreter": interp.path,
                    "pip_freeze": freeze.splitlines(),
                    "builder_version": BUILDER_VERSION,
                }
                sb.write_file("/swebox/env.json", json.dumps(info, indent=1) + "\n")
                sb.write_file("/swebox/build.log", "\n".join(log) + "\n")
                layer = sb.snapshot()
                # the toolchains' package caches (Go modules, cargo's registry, ~/.m2) stay with the env, outside
                # /testbed: its tests run offline from them
                entries = (*ENV_LAYER_ENTRIES, CACHE_ROOT.lstrip("/")) if tools else ENV_LAYER_ENTRIES
                return publish(
                    layer_dir=layer.path,
                    kind="env",
                    log="\n".join(log) + "\n",
                    include=entries,
                    meta={
                        "spec": spec.to_dict(),
                        "python": interp.version,
                        "interpreter": interp.path,
                        # an interpreter layer is stacked below (as a toolchain is), never bound from the host
                        "interpreters": [] if python.layer_key else [interp.prefix],
                        **({"python_layer": python.layer_key} if python.layer_key else {}),
                        **({"toolchains": stacked} if (stacked := _stacked(python, spec, tools)) else {}),
                    },
                )

    manifest = store.build(key, build, force=force)
    if interpreter_identity(manifest) != python.identity:
        raise InterpreterMismatch(
            f"env {key}: expected its layer to be built on {python.identity} (what Python {spec.python} resolves "
            f"to now); found one built on {interpreter_identity(manifest)}. Pin the interpreter in the spec "
            f"(env.interpreter = an interpreter layer key: `swebox cache python list`), or rebuild it "
            f"(`swebox cache build --force`)."
        )
    return manifest


def _stacked(python: _Python, spec: EnvSpec, tools: list[Layer]) -> dict[str, str]:
    """``meta["toolchains"]``: name -> key of the layers every sandbox over the env stacks below it, lowest
    first (the interpreter layer, then the spec's toolchains)."""
    minor = ".".join(python.interp.version.split(".")[:2])
    under = {layer_name(minor): python.layer_key} if python.layer_key else {}
    return {**under, **{n: t.name for n, t in zip(spec.toolchains, tools, strict=True)}}
