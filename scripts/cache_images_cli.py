"""``swebox cache pull``, ``rm-image``, the images part of ``ls`` and ``build --env-source`` (wired by
``scripts/cache_cli.py``).

An IMAGE argument names its source as skopeo does: ``oci:DIR[:TAG]`` (an OCI image layout folder),
``docker-archive:FILE[:REPO:TAG]`` (a ``docker save`` tarball) or ``[docker://]REGISTRY/REPO[:TAG|@DIGEST]``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import Counter

from swebox.envs.cache.budget import IOBudget
from swebox.envs.cache.images.convert import LayerDigestError
from swebox.envs.cache.images.records import ImageRecord, get_image, import_image, list_images, remove_image
from swebox.envs.cache.images.registry import RegistryConfig, RegistryError, pull
from swebox.envs.cache.images.sources import ImageSourceError, Platform, docker_archive, oci_layout
from swebox.envs.cache.layer_cache import LayerCacheConfig
from swebox.envs.cache.packing import UnsafeArchiveError
from swebox.envs.cache.store import LayerStore
from swebox.envs.episodes.layers_resolver import task_images


def add_registry_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--platform", default="linux/amd64", help="OS/ARCH[/VARIANT] (default linux/amd64)")
    parser.add_argument(
        "--insecure", action="store_true", help="plain HTTP, no TLS verification (a loopback test registry only)"
    )
    parser.add_argument(
        "--creds",
        default=os.environ.get("SWEBOX_REGISTRY_CREDS", ""),
        help="USER:PASSWORD (default $SWEBOX_REGISTRY_CREDS; else auth.json, else anonymous)",
    )
    parser.add_argument("--retries", type=int, default=4, help="retries after 429/5xx/dropped connections")


def add_arguments(sub: argparse._SubParsersAction) -> None:
    pull_cmd = sub.add_parser("pull", help="pull or import a container image into the store as layers")
    pull_cmd.add_argument("image", help="oci:DIR[:TAG], docker-archive:FILE[:REPO:TAG] or [docker://]REF")
    pull_cmd.add_argument(
        "--as",
        dest="name",
        default="",
        help="record the image under this name (default: the IMAGE argument without docker://)",
    )
    add_registry_arguments(pull_cmd)
    pull_cmd.set_defaults(func=cmd_pull)
    rm = sub.add_parser("rm-image", help="forget an image (gc then removes layers no other image uses)")
    rm.add_argument("names", nargs="+")
    rm.set_defaults(func=cmd_rm_image)


def _split(rest: str) -> tuple[str, str]:
    """``PATH[:TAG]`` -> (PATH, TAG); a colon inside the path's last folder name is part of the tag."""
    path, sep, tag = rest.rpartition(":")
    return (path, tag) if sep and "/" not in tag and path else (rest, "")


def fetch(
    store: LayerStore, image: str, name: str, platform: Platform, config: RegistryConfig, budget: IOBudget
) -> ImageRecord:
    """Pull or import ``image`` and record it as ``name``."""
    if image.startswith("oci:"):
        folder, tag = _split(image[4:])
        return import_image(store, oci_layout(folder, tag, platform), name, str(platform), budget)
    if image.startswith("docker-archive:"):
        path, _, ref = image[len("docker-archive:") :].partition(":")
        return import_image(store, docker_archive(path, ref, platform), name, str(platform), budget)
    record = pull(store, image.removeprefix("docker://"), platform, config, budget)
    return record if record.ref == name else _rename(store, record, name)


def _registry_config(args: argparse.Namespace) -> RegistryConfig:
    return RegistryConfig(insecure=args.insecure, creds=args.creds, retries=args.retries)


def cmd_pull(args: argparse.Namespace) -> int:
    from swebox.scripts.cache_store import open_store

    store = open_store(args, create=True)
    name = args.name or args.image.removeprefix("docker://")
    try:
        record = fetch(
            store,
            args.image,
            name,
            Platform.parse(args.platform),
            _registry_config(args),
            IOBudget(LayerCacheConfig().io_budget_mb),
        )
    except (RegistryError, ImageSourceError, LayerDigestError, UnsafeArchiveError, OSError) as e:
        print(f"swebox cache pull {args.image}: {e}", file=sys.stderr)  # the message says what to do
        return 1
    stored = sum(store.require(k).size for k in record.layers)
    print(
        f"{record.ref}: {len(record.layers)} layers, {stored / 1e6:.1f} MB stored "
        f"({record.compressed_bytes / 1e6:.1f} MB compressed), {record.platform}, {record.digest}"
    )
    return 0


def _rename(store: LayerStore, record: ImageRecord, name: str) -> ImageRecord:
    """A registry pull records the reference it pulled; keep it under the asked-for name instead."""
    from dataclasses import asdict, replace

    from swebox.envs.cache.images.records import record_path
    from swebox.envs.cache.store import write_atomic

    renamed = replace(record, ref=name)
    write_atomic(record_path(store, name), json.dumps(asdict(renamed), indent=1, sort_keys=True).encode())
    remove_image(store, record.ref)
    return renamed


def cmd_rm_image(args: argparse.Namespace) -> int:
    from swebox.scripts.cache_store import open_store

    store = open_store(args)
    missing = [n for n in args.names if not remove_image(store, n)]
    for name in missing:
        print(f"no image {name!r} in {store.root}", file=sys.stderr)
    print(f"forgot {len(args.names) - len(missing)} images; `swebox cache gc` removes their unshared layers")
    return 1 if missing else 0


def print_images(store: LayerStore) -> None:
    """The images table of ``swebox cache ls``: each image, its stored size, and how many of its layers
    other images share."""
    images = list_images(store)
    if not images:
        return
    users = Counter(k for r in images for k in set(r.layers))
    print(f"\n{'image':48} {'platform':12} {'layers':>6} {'shared':>6} {'stored MB':>10} {'packed MB':>10}")
    for r in images:
        stored = sum(m.size for m in (store.get(k) for k in r.layers) if m is not None)
        shared = sum(users[k] > 1 for k in r.layers)
        print(
            f"{r.ref:48} {r.platform:12} {len(r.layers):6} {shared:6} {stored / 1e6:10.1f} "
            f"{r.compressed_bytes / 1e6:10.1f}"
        )
    unique = {k for r in images for k in r.layers}
    total = sum(m.size for m in (store.get(k) for k in unique) if m is not None)
    print(
        f"{len(images)} images, {len(unique)} distinct layers ({sum(n > 1 for n in users.values())} shared), "
        f"{total / 1e6:.1f} MB"
    )


def build_images(args: argparse.Namespace, store: LayerStore) -> tuple[set[str], list[tuple[str, str]]]:
    """Pull the images the task rows name (per --env-source); returns (ids served by an image, failures).
    With ``auto``, a row whose image cannot be had falls back to its env recipe, and fails without one."""
    if args.env_source == "build":
        return set(), []
    from swebox.envs.tasks import load

    tasks = list(load(args.tasks))
    rows = task_images(tasks)
    if args.env_source == "image":
        missing = [t.instance_id for t in tasks if t.instance_id not in rows]
        if missing:
            raise SystemExit(
                f"--env-source image: {len(missing)} rows name no image (e.g. {missing[:3]}); "
                f"give each row metadata.image, or use --env-source auto."
            )
    has_recipe = {t.instance_id for t in tasks if t.env is not None}
    served, failed = set(), []
    budget = IOBudget(LayerCacheConfig().io_budget_mb)
    for image in sorted(set(rows.values())):
        ids = {i for i, name in rows.items() if name == image}
        if get_image(store, image) is None:
            try:
                fetch(store, image, image, Platform.parse(args.platform), _registry_config(args), budget)
            except Exception as e:  # one image must not stop the others; every failure is reported
                if args.env_source == "image" or not ids <= has_recipe:
                    failed.append(
                        (
                            image,
                            f"{e} (rows {sorted(ids - has_recipe)[:3]} have no env recipe)"
                            if args.env_source == "auto"
                            else str(e),
                        )
                    )
                else:
                    print(f"image {image} unavailable ({e}); building its rows' envs instead", file=sys.stderr)
                continue
        served |= ids
    print(f"{len(set(rows.values()))} images for {len(served)} of the rows: {len(failed)} failed")
    return served, failed
