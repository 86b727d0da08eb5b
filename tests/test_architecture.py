"""The design's import directions hold, with no exception, and no two modules import each other (docs/architecture.md).

The folders are the layers: ``trainers`` -> ``envs``; inside ``envs``: ``frameworks`` and ``search`` (which also
import ``gateway``: the Gymnasium env over a harness, harness lines) -> ``episodes`` -> ``agent``, ``audit`` ->
``tasks`` (with ``graders``, ``harbor_format``, ``synth``) -> ``cache`` -> ``sandbox``; nothing in ``envs/sandbox``
imports anything else of swebox; ``scripts`` (the commands) may import everything. Inside a layer any module may
import another, but never in a loop (A -> B -> ... -> A): a loop means neither module can be read, tested or moved
without the other. torch, ray, wandb and transformers are never imported at module level in ``envs/`` (only inside
functions, lazily). Every import statement counts, also one inside a function: an arrow is an arrow.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "ray", "wandb", "transformers", "vllm")
# what each part may import of swebox (by dotted prefix)
_BELOW_EPISODES = (
    "swebox.envs.agent",
    "swebox.envs.audit",
    "swebox.envs.tasks",
    "swebox.envs.cache",
    "swebox.envs.sandbox",
)
ALLOWED = {
    "swebox.envs.sandbox": ("swebox.envs.sandbox",),
    "swebox.envs.cache": ("swebox.envs.cache", "swebox.envs.sandbox"),
    "swebox.envs.tasks": ("swebox.envs.tasks", "swebox.envs.cache", "swebox.envs.sandbox"),
    "swebox.envs.agent": ("swebox.envs.agent", "swebox.envs.sandbox"),
    "swebox.envs.audit": ("swebox.envs.audit", "swebox.envs.tasks", "swebox.envs.cache", "swebox.envs.sandbox"),
    "swebox.envs.episodes": ("swebox.envs.episodes", *_BELOW_EPISODES),
    # the Gymnasium env over a harness (harness_gym_env.py) plays harness episodes through the model gateway
    "swebox.envs.frameworks": (
        "swebox.envs.frameworks",
        "swebox.envs.gateway",
        "swebox.envs.episodes",
        *_BELOW_EPISODES,
    ),
    # search plays text lines (episodes) and harness lines (episodes through the model gateway)
    "swebox.envs.search": ("swebox.envs.search", "swebox.envs.gateway", "swebox.envs.episodes", *_BELOW_EPISODES),
    # harness episodes: an episode of the episode layer played by an agent program through the model gateway
    "swebox.envs.gateway": ("swebox.envs.gateway", "swebox.envs.episodes", *_BELOW_EPISODES),
    "swebox.envs": ("swebox.envs",),  # the package itself (the Gymnasium id, old names): everything of envs
    "swebox.trainers": ("swebox.trainers", "swebox.envs"),
    "swebox.scripts": ("swebox",),
}
FOLDERS = {"envs": "swebox.envs", "trainers": "swebox.trainers", "scripts": "swebox.scripts"}


def module_name(path: Path) -> str:
    top, *rest = path.relative_to(REPO).with_suffix("").parts
    parts = [FOLDERS[top], *rest]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@functools.cache
def module_names() -> frozenset[str]:
    return frozenset(module_name(p) for p in sources())


def imports(path: Path) -> list[tuple[int, str, bool]]:
    """(line, imported module, at module level) for every import in the file, relative ones resolved;
    ``from pkg import mod`` counts as an import of ``pkg.mod`` when that is a module of the tree."""
    tree = ast.parse(path.read_text())
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    top_level = {id(node) for node in tree.body}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name, id(node) in top_level) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                name = f"{base}.{alias.name}" if f"{base}.{alias.name}" in module_names() else base
                found.append((node.lineno, name, id(node) in top_level))
    return found


def _part(module: str) -> str:
    return max((p for p in ALLOWED if module == p or module.startswith(p + ".")), key=len)


def sources() -> list[Path]:
    return sorted(p for folder in FOLDERS for p in (REPO / folder).rglob("*.py"))


def test_module_names_cover_the_tree():
    names = {module_name(p) for p in sources()}
    assert {
        "swebox.envs.sandbox.sandbox",
        "swebox.envs.tasks.graders.grading",
        "swebox.trainers.rl.trainer",
        "swebox.scripts.cli",
        "swebox.envs",
    } <= names


@pytest.mark.parametrize("path", sources(), ids=lambda p: str(p.relative_to(REPO)))
def test_imports_point_one_way(path):
    here = module_name(path)
    allowed = ALLOWED[_part(here)]
    wrong = [
        f"line {line}: {name}"
        for line, name, _ in imports(path)
        if name.startswith("swebox") and not any(name == a or name.startswith(a + ".") for a in allowed)
    ]
    assert not wrong, f"{here} imports against the design's direction: {wrong}"


@pytest.mark.parametrize("path", sorted((REPO / "envs").rglob("*.py")), ids=lambda p: str(p.relative_to(REPO)))
def test_envs_import_no_heavy_package_at_module_level(path):
    heavy = [f"line {line}: {name}" for line, name, top in imports(path) if top and name.split(".")[0] in HEAVY]
    assert not heavy, f"{module_name(path)} imports at module level: {heavy} (import them inside the function)"


def test_the_sandbox_loads_the_standard_library_only():
    import subprocess
    import sys

    code = (
        "import sys, swebox.envs.sandbox; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'gymnasium', 'numpy', 'torch', 'yaml'}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]"
    code = "import sys, swebox.trainers.run.config; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "False"


# The command lives in one room: every parser is in scripts/ (scripts/cli.py dispatches), library modules under
# envs/ and trainers/ expose functions and typed options. An entry point that must parse its own argv stays here
# with the reason; none does today (trainers/skyrl_entry.py passes SkyRL's overrides on untouched).
ARGPARSE_ALLOWED: dict[str, str] = {}


@pytest.mark.parametrize(
    "path",
    sorted(p for folder in ("envs", "trainers") for p in (REPO / folder).rglob("*.py")),
    ids=lambda p: str(p.relative_to(REPO)),
)
def test_no_argparse_outside_scripts(path):
    here = module_name(path)
    used = [line for line, name, _ in imports(path) if name == "argparse" or name.startswith("argparse.")]
    assert not used or here in ARGPARSE_ALLOWED, (
        f"{here} imports argparse (line {used[0] if used else '?'}): expected parsers in scripts/ (the command's "
        "room, dispatched by scripts/cli.py) and functions or typed options in the library; move the parser there"
    )
