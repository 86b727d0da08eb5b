"""``swebox cache ...``: build, list, verify, gc, export and import layers (progress bars with tqdm).

Wired into the ``swebox`` command by ``scripts/cli.py`` through :func:`add_arguments`. It lives with the command,
not in ``envs/cache``: reading task files is the tasks' side, and the cache library never imports it.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from swebox.envs.cache.builder import interpreter_identity
from swebox.envs.cache.checkout import CheckoutSpec, checkout_from_dict
from swebox.envs.cache.packing import FORMATS
from swebox.envs.cache.spec import EnvSpec
from swebox.envs.cache.store import LayerStore
from swebox.envs.cache.toolchain_specs import TOOLCHAINS, get_spec
from swebox.envs.cache.toolchains import build_toolchain, toolchain_key
from swebox.envs.cache.transfer import copy_layers
from swebox.scripts import cache_images_cli as images_cli
from swebox.scripts.cache_store import existing_store, open_store

DEFAULT_STORE = "runs/layers"


def _default_store() -> str:
    return os.environ.get("SWEBOX_LAYER_STORE", DEFAULT_STORE)


def add_arguments(subparsers: argparse._SubParsersAction) -> None:
    """Add ``cache`` and its sub-commands to the top-level ``swebox`` sub-parsers."""
    cache = subparsers.add_parser("cache", help="build, list, verify, gc, export and import env layers")
    cache.add_argument(
        "--store", default=_default_store(), help=f"layer store folder (default $SWEBOX_LAYER_STORE or {DEFAULT_STORE})"
    )
    sub = cache.add_subparsers(dest="cache_command", required=True)

    build = sub.add_parser("build", help="build the env layers of a task set (each distinct env once)")
    build.add_argument("--tasks", required=True, help="tasks file (JSONL rows with an 'env' dict)")
    build.add_argument("--jobs", type=int, default=1, help="builds at once (default 1)")
    build.add_argument(
        "--format",
        choices=FORMATS,
        default=None,
        help="layer format (default: squashfs if mksquashfs is installed, else tar.zst)",
    )
    build.add_argument(
        "--force", action="store_true", help="rebuild layers that failed before, and those the store has (replaced)"
    )
    build.add_argument(
        "--git-mirror",
        default=None,
        metavar="DIR",
        help="read GitHub repositories OWNER/NAME from DIR/OWNER__NAME.git (bare or shallow) "
        "instead of cloning (default $SWEBOX_GIT_MIRROR)",
    )
    build.add_argument(
        "--env-source",
        choices=("auto", "image", "build"),
        default="auto",
        help="image: pull the container image each row names; build: build envs from the rows' "
        "recipes; auto (default): the image where a row names one and it can be had, else build",
    )
    build.add_argument(
        "--python-layers",
        choices=("auto", "always", "never"),
        default="auto",
        help="auto (default): envs use the store's interpreter layer of their Python version, or one imported "
        "from a host install the sandbox cannot reach (pyenv's); always: always a layer; never: the host's "
        "interpreter, bound at its path (`swebox cache python`)",
    )
    images_cli.add_registry_arguments(build)
    build.set_defaults(func=cmd_build)

    sub.add_parser("ls", help="list the layers and images of the store").set_defaults(func=cmd_ls)
    images_cli.add_arguments(sub)

    verify = sub.add_parser("verify", help="re-hash every layer against its manifest")
    verify.add_argument("--remove-bad", action="store_true", help="delete layers that fail")
    verify.set_defaults(func=cmd_verify)

    gc = sub.add_parser("gc", help="sweep temporaries and evict least-recently-used layers")
    gc.add_argument("--keep-gb", type=float, required=True, help="keep at most this many GB of layers")
    gc.set_defaults(func=cmd_gc)

    export = sub.add_parser("export", help="copy layers into another store folder")
    export.add_argument("--to", required=True, help="destination store folder")
    export.add_argument("keys", nargs="*", help="layer keys (default: all)")
    export.set_defaults(func=cmd_export)

    imp = sub.add_parser("import", help="copy layers from another store folder into this one")
    imp.add_argument("--from", dest="source", required=True, help="source store folder")
    imp.add_argument("keys", nargs="*", help="layer keys (default: all)")
    imp.set_defaults(func=cmd_import)
    toolchain = sub.add_parser("toolchain", help="build and list toolchain layers (node, go, rust, jdk, cc)")
    tsub = toolchain.add_subparsers(dest="toolchain_command", required=True)
    tbuild = tsub.add_parser("build", help="build toolchain layers from Debian's packages (each once)")
    tbuild.add_argument("names", nargs="+", metavar="NAME", help="toolchain names (`swebox cache toolchain list`)")
    tbuild.add_argument("--force", action="store_true", help="rebuild one whose last build failed")
    tbuild.set_defaults(func=cmd_toolchain_build)
    tsub.add_parser("list", help="the toolchains, their packages, keys and whether the store has them").set_defaults(
        func=cmd_toolchain_list
    )
    python = sub.add_parser("python", help="import and list interpreter layers (/opt/swebox/python/X.Y)")
    psub = python.add_subparsers(dest="python_command", required=True)
    pimport = psub.add_parser("import", help="make interpreter layers from local installs (pyenv, uv, a prefix)")
    pimport.add_argument("paths", nargs="+", metavar="PATH", help="an install's prefix or its bin/pythonX.Y")
    pimport.add_argument("--force", action="store_true", help="import again though the store has this install")
    pimport.set_defaults(func=cmd_python_import)
    psub.add_parser("list", help="the store's interpreter layers").set_defaults(func=cmd_python_list)
    # `swebox cache build ... --store DIR` works too (error messages say so)
    for command in [*sub.choices.values(), *tsub.choices.values(), *psub.choices.values()]:
        command.add_argument(
            "--store", default=argparse.SUPPRESS, help="layer store folder (as before the sub-command)"
        )


def _progress(total: int, desc: str):
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="layer", file=sys.stderr, disable=None)


def read_env_specs(path: str, skip: set[str] | frozenset[str] = frozenset()) -> list[EnvSpec]:
    """Distinct EnvSpecs of a task file (rows whose instance_id is in ``skip`` left out), in first-seen order."""
    return read_build_plan(path, skip)[0]


def read_build_plan(
    path: str, skip: set[str] | frozenset[str] = frozenset()
) -> tuple[list[EnvSpec], list[CheckoutSpec], list[str]]:
    """What ``cache build`` makes for a task file: distinct env layers, distinct checkout layers (the starting
    trees of dataset rows, see :mod:`.checkout`), and one error per task it cannot build, naming the task.
    Rows whose instance_id is in ``skip`` (served by their container image) need neither. The tasks loader is
    imported here: the CLI sits above the library, which never imports tasks."""
    from swebox.envs.episodes.layers_resolver import image_of
    from swebox.envs.tasks import load
    from swebox.envs.tasks.recipes import conda_only_error, unbuildable_error

    envs: dict[str, EnvSpec] = {}
    checkouts: dict[str, CheckoutSpec] = {}
    errors: list[str] = []
    for task in load(path):
        if task.instance_id in skip:
            continue
        if task.env is None:
            if task.metadata.get("source") == "r2e-gym":  # R2E-Gym publishes images only, no recipes
                how = (
                    f"give {task.repo or 'its repository'} a recipe under version \"r2e\" in $SWEBOX_SWE_SPECS, "
                    f"or build from its image {task.metadata.get('docker_image') or '(none named)'} with "
                    f"--env-source image (docs/datasets.md, 'R2E-Gym')"
                )
            else:
                how = "give it an 'env', or see docs/datasets.md"
            errors.append(
                f"task {task.instance_id}: expected an env recipe; found none (the row names no "
                f"environment swebox can build: {how})"
            )
            continue
        if task.metadata.get("recipe_unbuildable"):
            errors.append(
                unbuildable_error(task.instance_id, list(task.metadata["recipe_unbuildable"]), image_of(task))
            )
            continue
        needs_conda = conda_only_error(
            task.instance_id, list(task.metadata.get("recipe_conda_only", ())), [*task.FAIL_TO_PASS, *task.PASS_TO_PASS]
        )
        if needs_conda:
            errors.append(needs_conda)
            continue
        envs.setdefault(task.env.key(), task.env)
        checkout = task.metadata.get("checkout")
        if not task.task_layer_key or not isinstance(checkout, dict):
            continue  # synthesised tasks: their task layers are made by `swebox tasks synth`
        spec = checkout_from_dict(task.env, checkout, task.bug_patch)
        if spec.key() != task.task_layer_key:
            errors.append(
                f"task {task.instance_id}: its task_layer_key {task.task_layer_key} is not the key of "
                f"its checkout {spec.key()} (metadata.checkout or bug_patch edited?); reload the row"
            )
            continue
        checkouts.setdefault(spec.key(), spec)
    return list(envs.values()), list(checkouts.values()), errors


def _build_all(pool, items, fn, bar, had) -> tuple[int, int, list[tuple[str, str]]]:
    futures = {pool.submit(fn, item): item.key() for item in items}
    built = reused = 0
    failed: list[tuple[str, str]] = []
    for future in as_completed(futures):
        key = futures[future]
        try:
            future.result()
            reused, built = (reused + 1, built) if had[key] else (reused, built + 1)
        except Exception as e:  # one bad layer must not stop the others; all are reported below
            failed.append((key, str(e)))
        bar.update(1)
    return built, reused, failed


def cmd_build(args: argparse.Namespace) -> int:
    from swebox.envs.cache.builder import BuilderConfig, build_env
    from swebox.envs.cache.checkout import build_checkout_layer
    from swebox.envs.cache.sources import resolve_mirror

    if args.jobs < 1:
        raise SystemExit(f"--jobs: expected at least 1; found {args.jobs}.")
    mirror = resolve_mirror(args.git_mirror)
    if mirror and not Path(mirror).is_dir():
        raise SystemExit(f"--git-mirror: expected a folder of OWNER__NAME.git repositories; found nothing at {mirror}.")
    store = open_store(args, args.format, create=True)
    config = BuilderConfig(python_layers=args.python_layers)
    served, image_failed = images_cli.build_images(args, store)
    specs, checkouts, errors = read_build_plan(args.tasks, served)  # a bad row: LoadError, one line, exit 2
    t0 = time.perf_counter()
    had = {s.key(): store.get(s.key()) is not None for s in [*specs, *checkouts]}
    with ThreadPoolExecutor(max_workers=args.jobs) as pool, _progress(len(specs) + len(checkouts), "layers") as bar:
        built, reused, env_failed = _build_all(
            pool, specs, lambda s: build_env(store, s, config=config, force=args.force, mirror=mirror), bar, had
        )
        bad_envs = {key for key, _ in env_failed}
        blocked = [
            (c.key(), f"not built: its env layer {c.env.key()} failed") for c in checkouts if c.env.key() in bad_envs
        ]
        todo = [c for c in checkouts if c.env.key() not in bad_envs]
        t_built, t_reused, t_failed = _build_all(
            pool, todo, lambda c: build_checkout_layer(store, c, mirror=mirror, force=args.force), bar, had
        )
    print(
        f"{len(specs)} envs: {built} built, {reused} reused, {len(env_failed)} failed "
        f"in {time.perf_counter() - t0:.1f} s; store {store.root} holds {store.total_bytes() / 1e6:.1f} MB"
    )
    if checkouts:
        print(
            f"{len(checkouts)} task layers (starting trees): {t_built} built, {t_reused} reused, "
            f"{len(t_failed) + len(blocked)} failed"
        )
    if errors:
        print(f"{len(errors)} tasks cannot be built (listed below)")
    failed = image_failed + env_failed + blocked + t_failed
    for key, error in failed:
        print(f"FAILED {key}: {error}", file=sys.stderr)
    for error in errors:
        print(f"FAILED {error}", file=sys.stderr)
    return 1 if failed or errors else 0


def cmd_ls(args: argparse.Namespace) -> int:
    store = open_store(args)
    manifests = store.ls()
    width = max([26, *(len(m.key) for m in manifests)])
    print(f"{'key':{width}} {'kind':13} {'format':8} {'MB':>9} {'files':>7}  {'created':16}  interpreter")
    for m in manifests:
        created = time.strftime("%Y-%m-%d %H:%M", time.localtime(m.created))
        # an env layer's interpreter (its layer's key, or the host's binary it binds): not always in its key
        python = interpreter_identity(m) if m.kind == "env" else ""
        print(f"{m.key:{width}} {m.kind:13} {m.format:8} {m.size / 1e6:9.2f} {m.files:7}  {created:16}  {python}")
    failed = sorted(p.stem for p in (store.root / "failed").glob("*.json"))
    for key in failed:
        print(f"{key:26} FAILED: {store.failure(key)['error'].splitlines()[0]}")
    print(f"{len(store.ls())} layers, {store.total_bytes() / 1e6:.1f} MB; {len(failed)} failed builds")
    images_cli.print_images(store)
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    store = open_store(args)
    manifests = store.ls()
    bad = []
    with _progress(len(manifests), "verifying") as bar:
        for m in manifests:
            bad += store.verify([m.key], remove_bad=args.remove_bad)
            bar.update(1)
    for key, problem in bad:
        print(f"BAD {key}: {problem}{' (removed)' if args.remove_bad else ''}")
    print(f"{len(manifests) - len(bad)} of {len(manifests)} layers verified")
    return 1 if bad else 0


def cmd_gc(args: argparse.Namespace) -> int:
    store = open_store(args)
    before = store.total_bytes()
    removed = store.gc(int(args.keep_gb * 1e9))
    print(
        f"removed {len(removed)} layers ({(before - store.total_bytes()) / 1e6:.1f} MB); "
        f"{store.total_bytes() / 1e6:.1f} MB kept"
    )
    return 0


def _copy(src: LayerStore, dst: LayerStore, keys: list[str]) -> int:
    todo = keys or [m.key for m in src.ls()]
    with _progress(len(todo), f"copying to {dst.root}") as bar:
        copied = copy_layers(src, dst, todo, on_layer=lambda _: bar.update(1))
    print(f"copied {len(copied)} layers ({len(todo) - len(copied)} were already there) into {dst.root}")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    return _copy(open_store(args), LayerStore(args.to), args.keys)


def cmd_import(args: argparse.Namespace) -> int:
    existing_store(args.source)
    return _copy(LayerStore(args.source), open_store(args, create=True), args.keys)


def cmd_toolchain_build(args: argparse.Namespace) -> int:
    unknown = [n for n in args.names if n not in TOOLCHAINS]
    if unknown:
        print(
            f"swebox cache toolchain build: expected names among {', '.join(TOOLCHAINS)}; found "
            f"{', '.join(map(repr, unknown))}. Fix: name one of those (`swebox cache toolchain list`).",
            file=sys.stderr,
        )
        return 2
    store = open_store(args, create=True)
    for name in dict.fromkeys(args.names):
        had = store.get(toolchain_key(name, store)) is not None
        manifest = build_toolchain(store, name, force=args.force)
        print(
            f"{name}: {manifest.key} ({len(manifest.meta['debs'])} packages, "
            f"{manifest.size / 1e6:.1f} MB{', already built' if had else ''})"
        )
    return 0


def cmd_toolchain_list(args: argparse.Namespace) -> int:
    store = open_store(args, create=True)
    for name in TOOLCHAINS:
        spec, key = get_spec(name), toolchain_key(name, store)
        state = "built" if store.get(key) is not None else "not built"
        print(f"{name:5} {key:36} {state:9}  {spec.prefix}  ({' '.join(spec.packages)})")
    return 0


def cmd_python_import(args: argparse.Namespace) -> int:
    from swebox.envs.cache.pythons import PythonImportError, import_python, python_layers

    store = open_store(args, create=True)
    for path in args.paths:
        had = {m.key for m in python_layers(store)}
        try:
            manifest = import_python(store, path, force=args.force)
        except PythonImportError as exc:
            print(exc, file=sys.stderr)
            return 2
        print(
            f"{path}: {manifest.key} at {manifest.meta['prefix']} ({manifest.size / 1e6:.1f} MB"
            f"{', already in the store' if manifest.key in had else ''})"
        )
    return 0


def cmd_python_list(args: argparse.Namespace) -> int:
    from swebox.envs.cache.pythons import python_layers

    for m in python_layers(open_store(args, create=True)):
        print(f"{m.meta['version']:8} {m.key:36} {m.meta['prefix']:24} {m.size / 1e6:7.1f} MB  from {m.meta['source']}")
    return 0
