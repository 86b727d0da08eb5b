"""A Harbor task's ``environment/Dockerfile`` as swebox layers: its ``FROM`` image plus one layer made rootless.

Supported lines: ``FROM`` (once, an image in the layer store: ``swebox cache pull REF`` gets it), ``RUN``
(shell or JSON form), ``WORKDIR``, ``ENV``, ``COPY`` (files and folders of ``environment/``, no flags) and
``USER root``; ``LABEL``, ``EXPOSE``, ``CMD``, ``ENTRYPOINT`` and ``HEALTHCHECK`` are recorded by Docker
for a container runtime and ignored here, as swebox's image runtime ignores an image's Entrypoint/Cmd.
Anything else (``ADD``, ``ARG``, ``USER`` of another user, ``COPY --from``, a second ``FROM``, ...) is
refused at load time with one line naming the Dockerfile line. ENV values are taken literally (Docker's
``$VAR`` substitution in ENV/WORKDIR/COPY is not done; RUN lines see the variables through the shell).

:func:`build_layer` runs the steps in a sandbox over the image (rootless where the store is: no daemon, no
privilege), then makes the final WORKDIR swebox's ``/testbed`` (its files move there and the WORKDIR becomes
a symlink to it, so the agent's paths keep working and git sees its changes) as a committed git repository,
and writes the ENV values and the WORKDIR into ``/root/.bashrc``, which every shell of an image sandbox
sources (docs/cache.md, "Images"): the agent's shell and grading's fresh sandboxes get them alike.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from swebox.envs.cache.build_commands import GIT_IDENTITY
from swebox.envs.cache.images import acquire_image, get_image
from swebox.envs.cache.layer_cache import LayerCache
from swebox.envs.cache.store import BuildFailure, LayerStore
from swebox.envs.sandbox import Sandbox

IGNORED = ("LABEL", "EXPOSE", "CMD", "ENTRYPOINT", "HEALTHCHECK", "MAINTAINER", "STOPSIGNAL")
REPO = "/testbed"


class DockerfileError(ValueError):
    """A Dockerfile line swebox cannot run; the message names the line and says how to fix it."""


@dataclass
class Step:
    """One executable Dockerfile line."""

    op: str
    """run | workdir | env | copy."""
    line: int
    """1-based line number where the instruction starts."""
    args: list[str] = field(default_factory=list)
    """run: [shell command]; workdir: [path]; env: [name, value, ...]; copy: [src..., dest]."""


@dataclass
class Recipe:
    """What a Dockerfile asks for: the base image and the steps above it."""

    image: str
    """The FROM reference."""
    steps: list[Step] = field(default_factory=list)
    """RUN/WORKDIR/ENV/COPY in order."""

    def to_dict(self) -> dict[str, Any]:
        return {"image": self.image, "steps": [[s.op, s.line, s.args] for s in self.steps]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Recipe:
        return cls(data["image"], [Step(op, line, list(args)) for op, line, args in data["steps"]])


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """(first line number, instruction) with comments dropped and backslash continuations joined."""
    out: list[tuple[int, str]] = []
    buf, start = "", 0
    for number, raw in enumerate(text.splitlines(), 1):
        stripped = raw.strip()
        if not buf and (not stripped or stripped.startswith("#")):
            continue
        if buf and stripped.startswith("#"):
            continue  # Docker drops comment lines inside a continuation
        if not buf:
            start = number
        if stripped.endswith("\\"):
            buf += stripped[:-1] + " "
            continue
        out.append((start, buf + stripped))
        buf = ""
    if buf:
        out.append((start, buf))
    return out


def _refuse(path: str, line: int, found: str, expected: str, fix: str) -> DockerfileError:
    return DockerfileError(f"{path}:{line}: expected {expected}; found {found[:120]!r}. {fix}")


def _env_pairs(path: str, line: int, rest: str) -> list[str]:
    try:
        words = shlex.split(rest)
    except ValueError as exc:
        raise _refuse(path, line, rest, "ENV NAME=VALUE ...", f"Fix the quoting ({exc}).") from None
    if words and "=" not in words[0]:  # the legacy form: ENV NAME VALUE WITH SPACES
        return [words[0], rest.split(None, 1)[1].strip() if len(words) > 1 else ""]
    pairs: list[str] = []
    for word in words:
        name, sep, value = word.partition("=")
        if not sep or not name:
            raise _refuse(path, line, rest, "ENV NAME=VALUE ...", "Write each variable as NAME=VALUE.")
        pairs += [name, value]
    return pairs


def parse(text: str, path: str = "Dockerfile") -> Recipe:
    """The recipe of a Dockerfile, or a DockerfileError naming the first line swebox cannot run."""
    image = ""
    steps: list[Step] = []
    for line, instruction in _logical_lines(text):
        word, _, rest = instruction.partition(" ")
        op, rest = word.upper(), rest.strip()
        if op == "FROM":
            if image:
                raise _refuse(
                    path,
                    line,
                    instruction,
                    "a single FROM",
                    "Multi-stage builds are not supported; "
                    "build the image elsewhere and name it in one FROM (swebox cache pull REF).",
                )
            parts = rest.split()
            if not parts or parts[0].startswith("--") or len(parts) not in (1, 3):
                raise _refuse(path, line, instruction, "FROM IMAGE[:TAG] (no flags)", "Drop --platform/AS.")
            image = parts[0]
            continue
        if not image:
            raise _refuse(path, line, instruction, "FROM before any other instruction", "Start with FROM IMAGE.")
        if op in IGNORED:
            continue
        if op == "RUN":
            if rest.startswith("--"):
                raise _refuse(path, line, instruction, "RUN COMMAND without flags", "Drop --mount/--network.")
            if rest.startswith("["):
                try:
                    argv = json.loads(rest)
                except json.JSONDecodeError:
                    argv = None
                if not (isinstance(argv, list) and argv and all(isinstance(a, str) for a in argv)):
                    raise _refuse(path, line, instruction, 'RUN ["prog", "arg", ...]', "Fix the JSON list.")
                rest = shlex.join(argv)
            steps.append(Step("run", line, [rest]))
        elif op == "WORKDIR" and rest:
            steps.append(Step("workdir", line, [rest]))
        elif op == "ENV" and rest:
            steps.append(Step("env", line, _env_pairs(path, line, rest)))
        elif op == "COPY":
            parts = rest.split()
            if any(p.startswith("--") for p in parts) or len(parts) < 2 or rest.startswith("["):
                raise _refuse(
                    path,
                    line,
                    instruction,
                    "COPY SRC... DEST (files of environment/, no flags)",
                    "Drop --from/--chown/--chmod; copy from another image by building it elsewhere.",
                )
            steps.append(Step("copy", line, parts))
        elif op == "USER":
            if rest not in ("root", "0", "root:root", "0:0"):
                raise _refuse(
                    path,
                    line,
                    instruction,
                    "USER root (the agent is uid 0 of its sandbox)",
                    "Remove the USER line; a swebox sandbox runs its shell as root of its namespace.",
                )
        else:
            raise _refuse(
                path,
                line,
                instruction,
                "FROM, RUN, WORKDIR, ENV, COPY or USER root",
                f"swebox cannot run {op} rootless; bake it into the FROM image instead.",
            )
    if not image:
        raise DockerfileError(f"{path}: expected a FROM line; found none. Add FROM IMAGE[:TAG].")
    return Recipe(image, steps)


def context_files(context: Path) -> dict[str, tuple[bytes, int]]:
    """Every file of ``environment/`` (the build context): relative path -> (bytes, mode)."""
    return {
        p.relative_to(context).as_posix(): (p.read_bytes(), p.stat().st_mode & 0o777)
        for p in sorted(context.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


def layer_key(recipe: Recipe, image_digest: str, files: dict[str, tuple[bytes, int]], repo: bool = True) -> str:
    """``"harbor-"`` + 20 hex of sha256 over the image's digest, the steps, the context files and ``repo``."""
    body = {
        "image": image_digest,
        "steps": recipe.to_dict()["steps"],
        "repo": repo,
        "files": {p: [hashlib.sha256(d).hexdigest(), m] for p, (d, m) in sorted(files.items())},
    }
    return "harbor-" + hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:20]


def _run(sb: Sandbox, command: str, what: str, timeout: float = 1800) -> str:
    result = sb.exec(command, timeout=timeout)
    if result.timed_out or result.exit_code != 0:
        status = "timed out" if result.timed_out else f"exit {result.exit_code}"
        raise BuildFailure(f"harbor environment: {what} failed ({status}): {result.output[-1500:]}", result.output)
    return result.output


def _copy(sb: Sandbox, step: Step, cwd: str, files: dict[str, tuple[bytes, int]]) -> None:
    *sources, dest = step.args
    dest_abs = posixpath.normpath(posixpath.join(cwd, dest))
    into_dir = dest.endswith("/") or len(sources) > 1
    for src in sources:
        src = posixpath.normpath(src).lstrip("/")
        src = "" if src == "." else src
        picked = {p: v for p, v in files.items() if p == src or not src or p.startswith(src + "/")}
        if not picked:
            raise BuildFailure(
                f"harbor environment: COPY at line {step.line}: expected {src!r} in environment/; "
                f"found no such file. Put it in the task's environment/ folder.",
                "",
            )
        for rel, (data, mode) in picked.items():
            if rel == src and not (into_dir or src == ""):
                target = dest_abs  # COPY file dest: dest is the file (a folder only when it ends with /)
            else:
                tail = rel if not src or rel == src else rel[len(src) + 1 :]
                tail = posixpath.basename(rel) if rel == src else tail
                target = posixpath.join(dest_abs, tail)
            _run(sb, f"mkdir -p {shlex.quote(posixpath.dirname(target))}", f"COPY at line {step.line}")
            sb.write_file(target, data, mode)


def _finish(sb: Sandbox, workdir: str, env: dict[str, str], repo: bool) -> None:
    """Make the final WORKDIR /testbed, a committed git repository (``repo``); persist ENV and WORKDIR in
    ~/.bashrc."""
    lines = [f"export {k}={shlex.quote(v)}" for k, v in env.items()] + [f"cd {shlex.quote(workdir)}"]
    _run(
        sb,
        "printf '%s\\n' "
        + " ".join(shlex.quote(x) for x in ["# harbor Dockerfile ENV/WORKDIR", *lines])
        + " >> /root/.bashrc",
        "writing ENV and WORKDIR to /root/.bashrc",
    )
    if not repo:
        return
    if workdir in ("/", ""):
        raise BuildFailure(
            "harbor environment: expected a WORKDIR (the agent's working folder, which swebox "
            "tracks with git); found none. Add e.g. WORKDIR /app to the Dockerfile.",
            "",
        )
    _run(
        sb,
        "command -v git >/dev/null",
        "finding git in the image (swebox diffs the WORKDIR with git; install "
        "git in the FROM image or with a RUN line)",
    )
    if workdir != REPO:
        q = shlex.quote(workdir)
        _run(
            sb,
            f"mkdir -p {REPO} {q} && cp -a {q}/. {REPO}/ && rm -rf {q} && ln -s {REPO} {q}",
            f"moving WORKDIR {workdir} to {REPO}",
        )
    git = "git -c safe.directory='*'"
    identity = " ".join(f"{k}={shlex.quote(v)}" for k, v in GIT_IDENTITY.items())
    _run(
        sb,
        f"cd {REPO} && (test -d .git || {git} init -q) && {git} add -A . && "
        f"(env {identity} {git} commit -q -m 'harbor environment' || {git} rev-parse -q --verify HEAD)",
        "committing the WORKDIR to git",
    )


def build_layer(
    store: LayerStore,
    cache: LayerCache,
    recipe: Recipe,
    files: dict[str, tuple[bytes, int]],
    *,
    network: str = "none",
    repo: bool = True,
    force: bool = False,
) -> tuple[str, str]:
    """Publish (once) the layer the Dockerfile's steps make over its FROM image; returns (key, workdir).

    ``files``: the build context (``environment/``, see :func:`context_files`); ``network``: the sandbox
    network for RUN lines ('none', or 'user' for steps that download); ``repo``: make the WORKDIR swebox's
    /testbed git repository (episodes and grading need it; Harbor's own trials do not)."""
    record = get_image(store, recipe.image)
    if record is None:
        raise DockerfileError(
            f"FROM {recipe.image}: expected an image in the layer store {store.root}; found "
            f"none. Pull it with: swebox cache pull {recipe.image} --store {store.root}"
        )
    key = layer_key(recipe, record.digest, files, repo)
    workdir = record.config.get("WorkingDir") or "/"
    env: dict[str, str] = {}
    for step in recipe.steps:
        if step.op == "workdir":
            workdir = posixpath.normpath(posixpath.join(workdir, step.args[0]))
        elif step.op == "env":
            env.update(zip(step.args[::2], step.args[1::2], strict=True))

    def build(publish):
        import dataclasses

        with acquire_image(cache, recipe.image) as held:
            policy = dataclasses.replace(held.policy, network=network)
            with Sandbox(held.paths, policy) as sb:
                cwd, exports = held.policy.workdir or "/", {}
                for step in recipe.steps:
                    where = f"line {step.line} ({step.op.upper()})"
                    if step.op == "run":
                        prefix = "".join(f"export {k}={shlex.quote(v)}; " for k, v in exports.items())
                        _run(sb, f"cd {shlex.quote(cwd)} && ({prefix}/bin/sh -c {shlex.quote(step.args[0])})", where)
                    elif step.op == "workdir":
                        cwd = posixpath.normpath(posixpath.join(cwd, step.args[0]))
                        _run(sb, f"mkdir -p {shlex.quote(cwd)}", where)
                    elif step.op == "env":
                        exports.update(zip(step.args[::2], step.args[1::2], strict=True))
                    else:
                        _copy(sb, step, cwd, files)
                _finish(sb, workdir, env, repo)
                layer = sb.snapshot()
                return publish(
                    layer_dir=layer.path,
                    kind="task",
                    parent=record.stack()[-1],
                    meta={"harbor_image": recipe.image, "workdir": workdir},
                )

    store.build(key, build, force=force)
    return key, workdir
