"""Benchmark the env cache: storage (swebox layers vs paper-style archives) and restore times per format.

One run prints three tables: (1) store size for a task set that shares environments (swebox's env + task
layers vs the paper's venv.tar.gz per env + repo.tar.gz per instance vs a full copy per task); (2) cold
(first use on a node) and warm (every later reset) restore per format, next to the paper's per-rollout
extraction; (3) 64 concurrent cold restores under a small I/O budget, with the peak MB in flight.
The environments are a generated fixture project at several commits, built for real (pip needs PyPI).
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from swebox.envs.cache import EnvSpec, IOBudget, LayerCache, LayerCacheConfig, LayerStore, build_env, build_task_layer
from swebox.envs.sandbox import Sandbox


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--envs", type=int, default=3, help="distinct environments (default 3)")
    parser.add_argument("--tasks-per-env", type=int, default=17, help="tasks per environment (default 17)")
    parser.add_argument("--concurrent", type=int, default=64, help="concurrent cold restores (default 64)")
    parser.add_argument("--modules", type=int, default=200, help="modules of the generated project (~16 KB each)")
    parser.add_argument("--budget-mb", type=int, default=16, help="I/O budget for the concurrency run")
    parser.add_argument("--work", default="", help="work folder (default: a temporary folder, removed)")
    parser.set_defaults(func=run)


def _project(root: Path, n_modules: int) -> None:
    """A fixture project of n_modules modules (~16 KB each, with docstrings that compress like real prose
    rather than like generated boilerplate) and one test per module; committed once per env by _commit."""
    rng = random.Random(0)
    (root / "src" / "proj").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=61"]\n'
        'build-backend = "setuptools.build_meta"\n[project]\nname = "proj"\n'
        'version = "0.1"\n'
    )
    (root / "src" / "proj" / "__init__.py").write_text("")
    for i in range(n_modules):
        body = "".join(
            f'def f{i}_{k}(x):\n    """{" ".join(rng.randbytes(4).hex() for _ in range(12))}"""\n'
            f"    return x * {k} + {i}\n\n\n"
            for k in range(100)
        )
        (root / "src" / "proj" / f"m{i}.py").write_text(body)
        (root / "tests" / f"test_m{i}.py").write_text(
            f"from proj.m{i} import f{i}_3\n\n\ndef test_f():\n    assert f{i}_3(1) == {3 + i}\n"
        )
    git = ["git", "-C", str(root), "-c", "user.name=b", "-c", "user.email=b@b"]
    subprocess.run([*git, "init", "-q", "-b", "main"], check=True)


def _commit(root: Path, tag: int) -> str:
    (root / "src" / "proj" / "version.py").write_text(f"VERSION = {tag}\n")
    git = ["git", "-C", str(root), "-c", "user.name=b", "-c", "user.email=b@b"]
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", f"v{tag}"], check=True)
    return subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()


def _tar_gz(src: Path, dest: Path, *names: str) -> int:
    subprocess.run(["tar", "-C", str(src), "-czf", str(dest), *names], check=True)
    return dest.stat().st_size


def _median_ms(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def _build_set(work: Path, args: argparse.Namespace) -> tuple[LayerStore, list[str], dict[str, list[str]]]:
    repo = work / "proj"
    _project(repo, args.modules)
    store = LayerStore(work / "store-squashfs", fmt="squashfs")
    cache = LayerCache(store, LayerCacheConfig(root=str(work / "node-build")))
    envs, tasks = [], {}
    for e in range(args.envs):
        spec = EnvSpec(source=str(repo), commit=_commit(repo, e))
        t0 = time.perf_counter()
        envs.append(build_env(store, spec).key)
        print(f"built env {envs[-1]} in {time.perf_counter() - t0:.1f} s")
        tasks[envs[-1]] = []
        for t in range(args.tasks_per_env):
            path = f"src/proj/m{t % args.modules}.py"
            original = (repo / path).read_text()
            bug = original.replace(f"return x * {t % 100} +", f"return x * {t % 100} -", 1).encode()
            tasks[envs[-1]].append(build_task_layer(store, envs[-1], {path: bug}, f"bug {t}", cache=cache).key)
    cache.close()
    return store, envs, tasks


def storage_table(work: Path, store: LayerStore, envs: list[str], tasks: dict[str, list[str]]) -> None:
    cache = LayerCache(store, LayerCacheConfig(root=str(work / "node-storage")))
    venv_gz, repo_gz = {}, {}
    for env in envs:
        with cache.acquire(env) as h:
            venv_gz[env] = _tar_gz(h.path, work / f"{env}.venv.tar.gz", "venv")
            repo_gz[env] = _tar_gz(h.path, work / f"{env}.repo.tar.gz", "testbed")
    cache.close()
    n_tasks = sum(len(v) for v in tasks.values())
    ours = sum(store.get(k).size for k in envs) + sum(store.get(k).size for ks in tasks.values() for k in ks)
    paper = sum(venv_gz.values()) + sum(repo_gz[e] * len(ks) for e, ks in tasks.items())
    full = sum((venv_gz[e] + repo_gz[e]) * len(ks) for e, ks in tasks.items())
    increments = [store.get(k).size for ks in tasks.values() for k in ks]
    repo_mb = statistics.mean(repo_gz.values()) / 1e6
    print(
        f"\n### Storage: {n_tasks} tasks over {len(envs)} envs (repo incl. .git: {repo_mb:.2f} MB as tar.gz; "
        f"venv: {statistics.mean(venv_gz.values()) / 1e6:.2f} MB as tar.gz)\n"
    )
    print("| layout | total MB | vs swebox |\n|---|---:|---:|")
    for name, size in [
        ("swebox (squashfs env layers + task layers)", ours),
        ("paper-style (venv.tar.gz per env + repo.tar.gz per task)", paper),
        ("full copy per task (venv + repo tar.gz)", full),
    ]:
        print(f"| {name} | {size / 1e6:.2f} | {size / ours:.1f}x |")
    print(
        f"\nper-task increment: mean {statistics.mean(increments) / 1024:.1f} KB, "
        f"max {max(increments) / 1024:.1f} KB; swebox / paper = {ours / paper:.3f}"
    )


def restore_table(work: Path, store: LayerStore, env: str, task: str) -> None:
    print("\n### Restore (ms, median)\n")
    print("| format | cold (first use on a node) | warm (sandbox reset) |\n|---|---:|---:|")
    src_cache = LayerCache(store, LayerCacheConfig(root=str(work / "node-src")))
    for fmt in ("squashfs", "tar.zst", "tar.gz"):
        fstore = store if fmt == "squashfs" else LayerStore(work / f"store-{fmt}", fmt=fmt)
        if fstore is not store:
            for key in (env, task):
                with src_cache.acquire(key) as h, fstore.lock(key):
                    m = store.get(key)
                    fstore.publish(key, h.path, kind=m.kind, parent=m.parent)
        colds = []
        for i in range(5):
            cache = LayerCache(fstore, LayerCacheConfig(root=str(work / f"cold-{fmt}-{i}")))
            subprocess.run(["sync"], check=True)
            t0 = time.perf_counter()
            he, ht = cache.acquire(env), cache.acquire(task)
            colds.append((time.perf_counter() - t0) * 1000)
            if i == 4:
                with Sandbox([he.path, ht.path]) as sb:
                    sb.exec("cd /testbed && echo x > new.txt && rm -rf src")
                    warm = _median_ms(sb.reset, 20)
            he.release()
            ht.release()
            cache.close()
            shutil.rmtree(work / f"cold-{fmt}-{i}", ignore_errors=True)
        print(f"| {fmt} | {statistics.median(colds):.1f} | {warm:.1f} |")
    src_cache.close()

    def paper_restore() -> None:
        out = Path(tempfile.mkdtemp(dir=work))
        subprocess.run(["tar", "-C", str(out), "-xzf", str(work / f"{env}.venv.tar.gz")], check=True)
        subprocess.run(["tar", "-C", str(out), "-xzf", str(work / f"{env}.repo.tar.gz")], check=True)
        shutil.rmtree(out)

    print(
        f"| paper-style per-rollout extraction (venv + repo tar.gz) | {_median_ms(paper_restore, 5):.1f} "
        f"| same, every rollout |"
    )


def concurrency_table(work: Path, envs: list[str], n: int, budget_mb: int) -> None:
    store = LayerStore(work / "store-tar.zst", fmt="tar.zst")
    keys = [k for k in envs if store.get(k)] or envs
    budget = IOBudget(budget_mb)
    errors: list[BaseException] = []

    def restore(i: int) -> None:
        try:
            cache = LayerCache(store, LayerCacheConfig(root=str(work / f"conc-{i}")), budget=budget)
            cache.acquire(keys[i % len(keys)]).release()
            cache.close()
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=restore, args=(i,)) for i in range(n)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    size = store.get(keys[0]).size / 1e6
    print(f"\n### {n} concurrent cold restores (tar.zst, {size:.1f} MB archives, budget {budget_mb} MB)\n")
    print(f"wall {wall:.1f} s, peak in flight {budget.peak_mb} MB (budget {budget_mb} MB), errors {len(errors)}")
    if budget.peak_mb > budget_mb or errors:
        raise SystemExit(f"budget exceeded or restores failed: {errors[:1]}")


def run(args: argparse.Namespace) -> int:
    work = Path(args.work or tempfile.mkdtemp(prefix="swebox-bench-cache-", dir="/var/tmp"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        store, envs, tasks = _build_set(work, args)
        storage_table(work, store, envs, tasks)
        restore_table(work, store, envs[0], tasks[envs[0]][0])
        concurrency_table(work, [envs[0]], args.concurrent, args.budget_mb)
    finally:
        for mnt in sorted(work.glob("*/layers/*")):
            if os.path.ismount(mnt):
                subprocess.run(["umount", "-l", str(mnt)], check=False)
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    return 0
