"""SWE-bench Verified rows built and graded here: the sample, the mirror folder, the per-row report.

The run itself is `swebox cache build` and `swebox tasks validate` (docs/verified.md gives the commands);
this script does what is around them:

    python -m swebox.scripts.bench_verified sample VERIFIED.parquet OUT.parquet   # the stratified sample
    python -m swebox.scripts.bench_verified mirror SNAPSHOTS DIR                  # DIR/OWNER__NAME.git links
    python -m swebox.scripts.bench_verified predictions OUT.parquet gold|empty PREDS.jsonl  # for swebox eval
    python -m swebox.scripts.bench_verified report OUT.parquet STORE VALIDATE.jsonl [BUILD_ERRORS.txt]

``report`` prints one markdown line per row: repository, Python, whether its env and starting tree were
built (from the store's manifests), the env layer's packed MB, the gold and empty verdicts, the seconds both
gradings took (the validate report's ``durations.total``), and the problem.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

# (repository, version, rows): the cheap repositories get more rows; one or two per expensive one
SAMPLE = [
    ("psf/requests", "2.0", 1),
    ("psf/requests", "2.26", 1),
    ("psf/requests", "2.27", 1),
    ("pallets/flask", "2.3", 1),
    ("pylint-dev/pylint", "2.15", 2),
    ("pylint-dev/pylint", "2.14", 1),
    ("pytest-dev/pytest", "5.4", 2),
    ("pytest-dev/pytest", "7.2", 2),
    ("mwaskom/seaborn", "0.12", 2),
    ("pydata/xarray", "0.12", 1),
    ("pydata/xarray", "2022.06", 1),
    ("sphinx-doc/sphinx", "4.1", 2),
    ("astropy/astropy", "5.1", 1),
    ("astropy/astropy", "5.2", 1),
    ("sympy/sympy", "1.1", 1),
    ("sympy/sympy", "1.12", 2),
]
EXTRA = ("astropy__astropy-13453",)
"""Rows added by id: an astropy row whose commits the mirror holds whole (5.1's and 5.2's lack a data file)."""


def sample(verified: str, out: str) -> None:
    """The first rows (by instance id) of each (repository, version) of :data:`SAMPLE`, then :data:`EXTRA`."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = pq.read_table(verified).to_pylist()
    picked = []
    for repo, version, count in SAMPLE:
        mine = sorted(
            (r for r in rows if r["repo"] == repo and r["version"] == version), key=lambda r: r["instance_id"]
        )
        picked += mine[:count]
    picked += [r for r in rows if r["instance_id"] in EXTRA]
    pq.write_table(pa.Table.from_pylist(picked), out)
    print(f"{len(picked)} rows -> {out}")


def mirror(snapshots: str, folder: str) -> None:
    """``folder/OWNER__NAME.git`` -> ``snapshots/OWNER+NAME/repo`` (the layout the fetch tool leaves)."""
    Path(folder).mkdir(parents=True, exist_ok=True)
    for repo in sorted(Path(snapshots).glob("*+*/repo")):
        link = Path(folder) / (repo.parent.name.replace("+", "__", 1) + ".git")
        if not link.exists():
            link.symlink_to(repo.resolve())
        print(f"{link} -> {repo}")


def predictions(rows_file: str, which: str, out: str) -> None:
    """SWE-bench predictions (``instance_id``, ``model_name_or_path``, ``model_patch``): each row's gold patch
    (``which='gold'``) or an empty one, for ``swebox eval --predictions``."""
    import pyarrow.parquet as pq

    if which not in ("gold", "empty"):
        raise SystemExit(f"predictions: expected 'gold' or 'empty'; found {which!r}")
    with open(out, "w", encoding="utf-8") as fh:
        for row in pq.read_table(rows_file).to_pylist():
            patch = row["patch"] if which == "gold" else ""
            fh.write(
                json.dumps({"instance_id": row["instance_id"], "model_name_or_path": which, "model_patch": patch})
                + "\n"
            )


def _layers(store: Path) -> dict[str, dict]:
    """Layer key -> its manifest (layers built; a failed one has none)."""
    return {p.stem: json.loads(p.read_text()) for p in (store / "manifests").glob("*.json")}


def report(rows_file: str, store: str, validate_jsonl: str, errors_file: str = "") -> None:
    """One markdown line per row of ``rows_file``."""
    from swebox.envs.tasks import load

    layers = _layers(Path(store))
    graded = {}
    for line in Path(validate_jsonl).read_text().splitlines():
        if line.strip():
            entry = json.loads(line)
            graded[entry["instance_id"]] = entry
    errors = Path(errors_file).read_text().splitlines() if errors_file else []
    print("| row | python | env built (MB packed) | start built | gold | empty | grade s | verdict / reason |")
    print("|---|---|---|---|---|---|---|---|")
    for task in load(rows_file):
        env = layers.get(task.env_key or "")
        start = layers.get(task.task_layer_key or "")
        env_cell = f"yes ({env['size'] / 1e6:.0f})" if env else "no"
        entry = graded.get(task.instance_id)
        gold = empty = seconds = "-"
        if entry and entry["gold"]:
            gold = "resolved" if entry["gold"]["resolved"] else "unresolved"
            empty = "resolved" if entry["empty"]["resolved"] else "unresolved"
            spent = [entry[k].get("durations", {}).get("total") for k in ("gold", "empty")]
            seconds = f"{sum(spent):.0f}" if all(isinstance(s, (int, float)) for s in spent) else "-"
        keys = [k for k in (task.instance_id, task.env_key, task.task_layer_key) if k]
        why = next((e for e in errors if any(k in e for k in keys)), "")
        verdict = "ok" if entry and entry["passed"] else (entry["problem"] if entry else why or "not graded")
        print(
            f"| {task.instance_id} | {task.env.python if task.env else '-'} | {env_cell} | "
            f"{'yes' if start else 'no'} | {gold} | {empty} | {seconds} | {verdict[:160]} |"
        )


def main(argv: list[str]) -> int:
    commands = {"sample": sample, "mirror": mirror, "predictions": predictions, "report": report}
    if not argv or argv[0] not in commands:
        print(f"usage: bench_verified {{{'|'.join(commands)}}} ARGS... (see the module's docstring)", file=sys.stderr)
        return 2
    commands[argv[0]](*argv[1:])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
