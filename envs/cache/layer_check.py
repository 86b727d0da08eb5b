"""The check a freshly built read-only layer passes before publication: a command in a sandbox over it alone.

Interpreter layers (:mod:`.pythons`: the relocated interpreter imports ssl and makes a venv) and toolchain layers
(:mod:`.toolchains`: ``node --version`` ...) both run one; a failure fails the build with the output's tail and
the whole log, so a broken layer never reaches the store.
"""

from __future__ import annotations

from pathlib import Path

from ..sandbox import Layer, Sandbox, SandboxPolicy
from .store import BuildFailure


def check_layer(tree: Path, name: str, command: str, env: dict[str, str], log: list[str], what: str) -> None:
    """Run ``command`` in a network-less sandbox over the layer ``tree`` only (named ``name``, with ``env``),
    appending the command and its output to ``log``; a non-zero exit or a timeout raises :class:`BuildFailure`
    saying ``{what} failed (exit N)`` and the output's last lines."""
    with Sandbox([Layer(tree, name=name)], SandboxPolicy(network="none", env=env)) as sb:
        result = sb.exec(command, timeout=300)
    log += [f"$ {command}", result.output.rstrip("\n")]
    if result.timed_out or result.exit_code != 0:
        raise BuildFailure(
            f"{what} failed (exit {result.exit_code}):\n" + "\n".join(result.output.splitlines()[-15:]),
            "\n".join(log),
        )
