"""Harbor task folders in: ``task.toml``, ``instruction.md``, ``environment/``, ``tests/``, ``solution/``.

A Harbor task (harbor 0.25's ``TaskPaths``) becomes one swebox :class:`Task` with ``grader='harbor'``:
``instruction.md`` is the problem statement; ``tests/`` travels in ``metadata['harbor']['tests']`` (never in
the agent's sandbox) and grading writes it to ``/tests`` of a fresh sandbox and runs ``/tests/test.sh``
(:mod:`swebox.envs.tasks.harbor_format.verify`); ``environment/Dockerfile`` (or ``[environment].docker_image``) is
parsed at load time (:mod:`swebox.envs.tasks.harbor_format.dockerfile`, unsupported lines refused there) and made
into a layer over its FROM image by :func:`build_layers`, which also runs ``solution/solve.sh`` once to record
its effect on the WORKDIR as the task's gold ``patch``.
"""

from __future__ import annotations

import base64
import dataclasses
import re
import shlex
from pathlib import Path
from typing import Any

import tomllib
from swebox.envs.cache.images import acquire_image
from swebox.envs.cache.layer_cache import LayerCache, LayerCacheConfig
from swebox.envs.cache.store import LayerStore
from swebox.envs.sandbox import Sandbox
from swebox.envs.tasks.harbor_format import dockerfile
from swebox.envs.tasks.schema import Task, TaskError

TEST_CMD = "/tests/test.sh"
"""What grading runs (Harbor's verifier runs the script directly after ``chmod +x``)."""
DEFAULT_VERIFIER_TIMEOUT_S = 600.0
"""Harbor's ``[verifier].timeout_sec`` default."""


def is_task_dir(path: Path) -> bool:
    return (path / "task.toml").is_file()


def task_dirs(path: Path) -> list[Path]:
    """``path`` itself when it is a task, else its task subfolders (a dataset), sorted; [] when neither."""
    if is_task_dir(path):
        return [path]
    return sorted(p for p in path.iterdir() if p.is_dir() and is_task_dir(p)) if path.is_dir() else []


def _files(folder: Path) -> dict[str, list]:
    """relative path -> [base64 bytes, mode]: a folder's files as JSON can carry them."""
    return (
        {rel: [base64.b64encode(data).decode(), mode] for rel, (data, mode) in dockerfile.context_files(folder).items()}
        if folder.is_dir()
        else {}
    )


def unpack(files: dict[str, list]) -> dict[str, tuple[bytes, int]]:
    """Inverse of the folder encoding in ``metadata['harbor']``."""
    return {rel: (base64.b64decode(b64), int(mode)) for rel, (b64, mode) in files.items()}


def _bad(task_dir: Path, what: str, expected: str, found: str, fix: str) -> TaskError:
    return TaskError(f"{task_dir}: {what}: expected {expected}; found {found}. {fix}")


def _config(task_dir: Path) -> dict[str, Any]:
    try:
        config = tomllib.loads((task_dir / "task.toml").read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise _bad(
            task_dir,
            "task.toml",
            "valid TOML (Harbor's task config)",
            f"a parse error ({exc})",
            "Fix the TOML syntax; `harbor tasks check` validates it too.",
        ) from None
    for table in ("verifier", "agent", "environment", "solution", "metadata"):
        if not isinstance(config.get(table, {}), dict):
            raise _bad(
                task_dir,
                f"task.toml [{table}]",
                "a table",
                repr(config[table])[:80],
                f"Write it as a [{table}] section.",
            )
    timeout = config.get("verifier", {}).get("timeout_sec", DEFAULT_VERIFIER_TIMEOUT_S)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
        raise _bad(
            task_dir,
            "task.toml [verifier].timeout_sec",
            "a positive number of seconds",
            repr(timeout),
            "Set e.g. timeout_sec = 600.0.",
        )
    if config.get("steps"):
        raise _bad(
            task_dir,
            "task.toml [[steps]]",
            "a single-step task",
            f"{len(config['steps'])} steps",
            "Multi-step Harbor tasks are not supported; split them into single-step tasks.",
        )
    return config


def _recipe(task_dir: Path, config: dict[str, Any]) -> dockerfile.Recipe:
    path = task_dir / "environment" / "Dockerfile"
    if path.is_file():
        try:
            return dockerfile.parse(path.read_text(encoding="utf-8"), str(path))
        except dockerfile.DockerfileError as exc:
            raise TaskError(str(exc)) from None
    image = config.get("environment", {}).get("docker_image")
    if isinstance(image, str) and image:
        return dockerfile.Recipe(image, [])
    compose = task_dir / "environment" / "docker-compose.yaml"
    found = "a docker-compose.yaml (multi-container)" if compose.exists() else "neither"
    raise _bad(
        task_dir,
        "environment",
        "environment/Dockerfile or [environment].docker_image",
        found,
        "Give the task a Dockerfile (FROM an image swebox can pull) or a prebuilt docker_image.",
    )


def task_id(task_dir: Path, config: dict[str, Any]) -> str:
    """The folder's name (Harbor's short task name), made a valid swebox id."""
    return re.sub(r"[\s/]+", "_", task_dir.name)


def load_task(task_dir: Path) -> Task:
    """One Harbor task folder as a Task (its environment layer not built yet: :func:`build_layers`)."""
    task_dir = Path(task_dir).absolute()
    if not (task_dir / "tests" / "test.sh").is_file():
        raise _bad(
            task_dir,
            "tests/test.sh",
            "the verifier script (it writes /logs/verifier/reward.txt or reward.json)",
            "no such file",
            "Add tests/test.sh; swebox grades Linux tasks with it.",
        )
    config = _config(task_dir)
    instruction = task_dir / "instruction.md"
    if not instruction.is_file():
        raise _bad(task_dir, "instruction.md", "the task's instruction", "no such file", "Add instruction.md.")
    recipe = _recipe(task_dir, config)
    verifier = config.get("verifier", {})
    harbor = {
        "recipe": recipe.to_dict(),
        "environment": _files(task_dir / "environment"),
        "tests": _files(task_dir / "tests"),
        "solution": _files(task_dir / "solution"),
        "verifier_timeout_s": float(verifier.get("timeout_sec", DEFAULT_VERIFIER_TIMEOUT_S)),
        "verifier_env": {str(k): str(v) for k, v in (verifier.get("env") or {}).items()},
        "task_toml": (task_dir / "task.toml").read_text(encoding="utf-8"),
        "source": str(task_dir),
    }
    name = (config.get("task") or {}).get("name", "") if isinstance(config.get("task"), dict) else ""
    return Task(
        instance_id=task_id(task_dir, config),
        repo=str(name or task_dir.name),
        problem_statement=instruction.read_text(encoding="utf-8"),
        grader="harbor",
        test_cmd=TEST_CMD,
        metadata={"image": recipe.image, "harbor": harbor, "source": "harbor"},
    )


def _gold_patch(task: Task, paths: list[str], policy: Any) -> str:
    """Run solution/solve.sh (as Harbor's oracle does: uploaded to /solution, made executable, run) in a
    sandbox of the task's start layers and return its change to /testbed as a git diff ('' without one)."""
    solution = unpack(task.metadata["harbor"]["solution"])
    if "solve.sh" not in solution:
        return ""
    with Sandbox(paths, policy) as sb:
        for rel, (data, mode) in solution.items():
            sb.exec(f"mkdir -p {shlex.quote(str(Path('/solution', rel).parent))}", timeout=60)
            sb.write_file(f"/solution/{rel}", data, mode)
        run = sb.exec(
            "chmod +x /solution/solve.sh && DEBIAN_FRONTEND=noninteractive /solution/solve.sh",
            timeout=task.metadata["harbor"]["verifier_timeout_s"],
        )
        if run.timed_out or run.exit_code != 0:
            raise TaskError(
                f"task {task.instance_id}: solution/solve.sh: expected exit 0; found "
                f"{'a timeout' if run.timed_out else f'exit {run.exit_code}'}: {run.output[-800:]}. "
                "Fix the solution script (it runs in the task's environment)."
            )
        out = "/tmp/swebox-oracle.diff"
        sb.exec(
            f"cd /testbed && git -c safe.directory='*' add -A . && git -c safe.directory='*' diff --cached "
            f"--binary --full-index --no-color --no-renames HEAD > {out}",
            timeout=300,
        )
        return sb.read_file(out, max_bytes=64 << 20).decode("utf-8", errors="surrogateescape")


def build_layers(
    tasks: list[Task], store: LayerStore | str, *, cache_root: str = "", network: str = "none", force: bool = False
) -> list[Task]:
    """Build (once; cached in ``store`` by content) each Harbor task's environment layer over its FROM image,
    and record solve.sh's effect as the gold patch; returns the tasks with ``task_layer_key`` and ``patch``
    set. Tasks that are not Harbor tasks come back unchanged."""
    store = store if isinstance(store, LayerStore) else LayerStore(store)
    cache = LayerCache(store, LayerCacheConfig(root=cache_root))
    out: list[Task] = []
    try:
        for task in tasks:
            harbor = task.metadata.get("harbor")
            if task.grader != "harbor" or not isinstance(harbor, dict):
                out.append(task)
                continue
            recipe = dockerfile.Recipe.from_dict(harbor["recipe"])
            files = unpack(harbor["environment"])
            key, workdir = dockerfile.build_layer(store, cache, recipe, files, network=network, force=force)
            meta = {**task.metadata, "harbor": {**harbor, "workdir": workdir}}
            with acquire_image(cache, recipe.image) as held, cache.acquire(key) as layer:
                patch = task.patch or _gold_patch(task, [*held.paths, str(layer.path)], held.policy)
            out.append(dataclasses.replace(task, task_layer_key=key, patch=patch, metadata=meta))
    finally:
        cache.close()
    return out
