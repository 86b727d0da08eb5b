"""SWE-smith's recipes: an env's Python version and install commands from ``swesmith``'s per-repo profiles.

The profiles are read from ``swesmith/profiles/python.py`` with ``ast``, without importing it (the package imports
docker and GitHub clients); a recipe in ``$SWEBOX_SWE_SPECS`` overrides them. System lines are handled as for
every recipe (recipes.py): locale generation becomes a rootless ``localedef``, the rest makes it unbuildable.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
from typing import Any

from swebox.envs.tasks.recipes import (
    SPECS_ENV,
    SYSTEM_LINE,
    Recipe,
    locale_commands,
    package_dir,
    unbuildable_lines,
    user_recipe,
)
from swebox.envs.tasks.schema import TaskError


def _literal(node: ast.AST) -> Any:
    if isinstance(node, ast.Call) and node.keywords:  # field(default_factory=lambda: [...])
        factory = next((k.value for k in node.keywords if k.arg == "default_factory"), None)
        if isinstance(factory, ast.Lambda):
            return ast.literal_eval(factory.body)
    return ast.literal_eval(node)


@functools.lru_cache(maxsize=1)
def swesmith_profiles() -> dict[tuple[str, str], list[dict]]:
    """(owner, repo) -> profiles (``commit``, ``python_version``, ``install_cmds``) of swesmith's Python
    profiles, read from its source with ``ast`` (class fields that are literals; inheritance followed)."""
    path = package_dir("swesmith", "0.0.9") / "profiles" / "python.py"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    classes: dict[str, tuple[list[str], dict]] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            fields = {}
            for stmt in node.body:
                if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value:
                    try:
                        fields[stmt.target.id] = _literal(stmt.value)
                    except (ValueError, TypeError, SyntaxError):
                        pass  # computed defaults (f-strings of constants) are not needed here
            classes[node.name] = ([b.id for b in node.bases if isinstance(b, ast.Name)], fields)

    def resolved(name: str) -> dict:
        bases, fields = classes.get(name, ([], {}))
        out: dict = {}
        for base in bases:
            out.update(resolved(base))
        return {**out, **fields}

    profiles: dict[tuple[str, str], list[dict]] = {}
    for name in classes:
        fields = resolved(name)
        if "owner" in fields and "repo" in fields and "commit" in fields:
            profiles.setdefault((fields["owner"], fields["repo"]), []).append(fields)
    return profiles


def swesmith_recipe(owner: str, name: str, commit: str) -> Recipe:
    """The recipe of SWE-smith's ``swesmith/OWNER__NAME.COMMIT`` (from $SWEBOX_SWE_SPECS, else swesmith)."""
    recipe = user_recipe(f"{owner}/{name}", commit)
    if recipe is not None:
        # SWE-smith installs the project at its snapshot, which is the env's commit: everything is env work
        return dataclasses.replace(recipe, env_install=recipe.env_install + recipe.repo_commands, repo_commands=())
    profiles = [p for p in swesmith_profiles().get((owner, name), []) if str(p["commit"]).startswith(commit)]
    if not profiles:
        raise TaskError(
            f"Task.repo: expected a SWE-smith repository with a profile in swesmith 0.0.9; found none "
            f"for {owner}/{name} at {commit}. Give its recipe in ${SPECS_ENV} under "
            f'"{owner}/{name}": {{"{commit}": {{...}}}}.'
        )
    p = profiles[0]
    commands = tuple(p.get("install_cmds", ()))
    skipped = tuple(c for c in commands if SYSTEM_LINE.search(c))  # 6 of swesmith 0.0.9's profiles run apt-get
    install = (*locale_commands(skipped), *(c for c in commands if c not in skipped))
    return Recipe(
        python=str(p.get("python_version", "3.10")),
        env_install=install,
        repo_commands=(),
        test_cmd="pytest --disable-warnings --color=no --tb=no --verbose",
        skipped=skipped,
        unbuildable=unbuildable_lines(skipped),
    )
