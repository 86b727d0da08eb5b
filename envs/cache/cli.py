"""``swebox cache ...``: build, list, verify, gc, export and import layers (progress bars with tqdm).

Wired into the ``swebox`` command by ``scripts/cli.py`` through :func:`add_arguments`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from .images import cli as images_cli
from .packing import FORMATS
from .spec import EnvSpec
from .store import LayerStore, copy_layers

DEFAULT_STORE = "runs/layers"


def _default_store() -> str:
    return os.environ.get("SWEBOX_LAYER_STORE", DEFAULT_STORE)


def add_arguments(subparsers: argparse._SubParsersAction) -> None:
    """Add ``cache`` and its sub-commands to the top-level ``swebox`` sub-parsers."""
    cache = subparsers.add_parser("cache", help="build, list, verify, gc, export and import env layers")
    cache.add_argument("--store", default=_default_store(),
                       help=f"layer store folder (default $SWEBOX_LAYER_STORE or {DEFAULT_STORE})")
    sub = cache.add_subparsers(dest="cache_command", required=True)

    build = sub.add_parser("build", help="build the env layers of a task set (each distinct env once)")
    build.add_argument("--tasks", required=True, help="tasks file (JSONL rows with an 'env' dict)")
    build.add_argument("--jobs", type=int, default=1, help="builds at once (default 1)")
    build.add_argument("--format", choices=FORMATS, default=None, help="layer format (default: squashfs if "
                       "mksquashfs is installed, else tar.zst)")
    build.add_argument("--force", action="store_true", help="rebuild layers that failed before")
    build.add_argument("--env-source", choices=("auto", "image", "build"), default="auto",
                       help="image: pull the container image each row names; build: build envs from the rows' "
                            "recipes; auto (default): the image where a row names one and it can be had, else build")
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
    for command in sub.choices.values():  # `swebox cache build ... --store DIR` works too (error messages say so)
        command.add_argument("--store", default=argparse.SUPPRESS, help="layer store folder (as before the "
                             "sub-command)")


def _progress(total: int, desc: str):
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="layer", file=sys.stderr, disable=None)


def _open(args: argparse.Namespace, fmt: str | None = None) -> LayerStore:
    from .store import available_formats

    return LayerStore(args.store, fmt=fmt or available_formats()[0])


def read_env_specs(path: str, skip: set[str] | frozenset[str] = frozenset()) -> list[EnvSpec]:
    """Distinct EnvSpecs of a task file (rows whose instance_id is in ``skip`` left out), in first-seen
    order. Uses the tasks loader when installed (the CLI sits above the library; the cache library itself
    never imports tasks), else reads JSONL rows."""
    try:
        from swebox.envs.tasks import load
    except ImportError:
        load = None
    specs: dict[str, EnvSpec] = {}
    if load is not None:
        for task in load(path):
            if task.env is not None and task.instance_id not in skip:
                specs.setdefault(task.env.key(), task.env)
        return list(specs.values())
    for n, line in enumerate(Path(path).read_text().splitlines(), 1):
        if line.strip():
            row = json.loads(line)
            if row.get("instance_id") in skip:
                continue
            if not isinstance(row.get("env"), dict):
                raise ValueError(f"{path}:{n}: expected an 'env' dict (an EnvSpec) in every task row.")
            spec = EnvSpec.from_dict(row["env"])
            specs.setdefault(spec.key(), spec)
    return list(specs.values())


def cmd_build(args: argparse.Namespace) -> int:
    from .builder import build_env

    if args.jobs < 1:
        raise SystemExit(f"--jobs: expected at least 1; found {args.jobs}.")
    store = _open(args, args.format)
    served, failed = images_cli.build_images(args, store)
    specs = read_env_specs(args.tasks, served)
    reused = built = 0
    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=args.jobs) as pool, _progress(len(specs), "env layers") as bar:
        had = {s.key(): store.get(s.key()) is not None for s in specs}
        futures = {pool.submit(build_env, store, s, force=args.force): s for s in specs}
        for future in as_completed(futures):
            key = futures[future].key()
            try:
                future.result()
                reused, built = (reused + 1, built) if had[key] else (reused, built + 1)
            except Exception as e:  # one bad env must not stop the others; all are reported below
                failed.append((key, str(e)))
            bar.update(1)
    print(f"{len(specs)} envs: {built} built, {reused} reused, {len(failed)} failed "
          f"in {time.perf_counter() - t0:.1f} s; store {store.root} holds {store.total_bytes() / 1e6:.1f} MB")
    for key, error in failed:
        print(f"FAILED {key}: {error}", file=sys.stderr)
    return 1 if failed else 0


def cmd_ls(args: argparse.Namespace) -> int:
    store = _open(args)
    manifests = store.ls()
    width = max([26, *(len(m.key) for m in manifests)])
    print(f"{'key':{width}} {'kind':13} {'format':8} {'MB':>9} {'files':>7}  created")
    for m in manifests:
        created = time.strftime("%Y-%m-%d %H:%M", time.localtime(m.created))
        print(f"{m.key:{width}} {m.kind:13} {m.format:8} {m.size / 1e6:9.2f} {m.files:7}  {created}")
    failed = sorted(p.stem for p in (store.root / "failed").glob("*.json"))
    for key in failed:
        print(f"{key:26} FAILED: {store.failure(key)['error'].splitlines()[0]}")
    print(f"{len(store.ls())} layers, {store.total_bytes() / 1e6:.1f} MB; {len(failed)} failed builds")
    images_cli.print_images(store)
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    store = _open(args)
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
    store = _open(args)
    before = store.total_bytes()
    removed = store.gc(int(args.keep_gb * 1e9))
    print(f"removed {len(removed)} layers ({(before - store.total_bytes()) / 1e6:.1f} MB); "
          f"{store.total_bytes() / 1e6:.1f} MB kept")
    return 0


def _copy(src: LayerStore, dst: LayerStore, keys: list[str]) -> int:
    todo = keys or [m.key for m in src.ls()]
    with _progress(len(todo), f"copying to {dst.root}") as bar:
        copied = copy_layers(src, dst, todo, on_layer=lambda _: bar.update(1))
    print(f"copied {len(copied)} layers ({len(todo) - len(copied)} were already there) into {dst.root}")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    return _copy(_open(args), LayerStore(args.to), args.keys)


def cmd_import(args: argparse.Namespace) -> int:
    return _copy(LayerStore(args.source), _open(args), args.keys)
