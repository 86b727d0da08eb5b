"""``swebox skyrl prepare``: a task file -> SkyRL-ready parquet files (one row per task).

Columns (SkyRL's PromptDataset passes every column but ``prompt`` and ``env_class`` to the env as extras):

- ``data_source``: a label SkyRL groups evaluation metrics by (default ``swebox``);
- ``prompt``: the first messages, ``[{"role": "system", ...}, {"role": "user", ...}]``, in the chosen style;
- ``env_class``: ``swebox`` (the id ``register_skyrl()`` registers);
- ``reward_spec``: ``{"method": "swebox_tests", "ground_truth": <instance_id>}`` (the reward is computed by
  running the task's tests; nothing to compare against);
- ``instance``: the whole Task as one JSON string (a JSON string, not a struct: parquet would merge the
  schemas of different rows' metadata);
- ``extra_info``: ``{"instance_id", "env_key", "swebox"}`` where ``swebox`` is a JSON string of the settings
  given here (max_turns, style, the layer store...), which the env applies over its registered kwargs.

The command, ``swebox skyrl prepare``, is scripts/skyrl_cli.py; this module holds what it calls.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from swebox.envs.episodes.episode import EpisodeConfig, first_messages
from swebox.envs.episodes.layers_resolver import LayerSource
from swebox.envs.tasks.schema import Task

ENV_CLASS = "swebox"


def task_row(task: Task, config: EpisodeConfig, settings: dict[str, Any], data_source: str = "swebox") -> dict:
    """One parquet row for ``task``; ``settings`` (JSON-able) travel in extra_info['swebox']."""
    return {
        "data_source": data_source,
        "prompt": first_messages(task, config),
        "env_class": ENV_CLASS,
        "reward_spec": {"method": "swebox_tests", "ground_truth": task.instance_id},
        "instance": task.to_json(),
        "extra_info": {
            "instance_id": task.instance_id,
            "env_key": task.env_key,
            "swebox": json.dumps(settings, sort_keys=True),
        },
    }


def write_parquet(rows: list[dict], path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    pq.write_table(pa.Table.from_pylist(rows), tmp)
    tmp.rename(path)


def prepare(
    tasks: list[Task],
    out: str | Path,
    settings: dict[str, Any],
    *,
    val_size: int = 0,
    seed: int = 0,
    data_source: str = "swebox",
) -> dict[str, int]:
    """Write ``out/train.parquet`` (and ``out/validation.parquet`` with ``val_size`` tasks drawn with
    ``seed``); returns the row count per file."""
    episode = {k: v for k, v in settings.items() if k != "layers"}
    config = EpisodeConfig.from_dict(episode)
    LayerSource.from_dict(settings.get("layers"))
    if not 0 <= val_size < len(tasks):
        raise ValueError(
            f"--val-size: expected 0 to {len(tasks) - 1} (fewer than the {len(tasks)} tasks); found {val_size}."
        )
    order = list(range(len(tasks)))
    random.Random(seed).shuffle(order)
    val = set(order[:val_size])
    splits = {
        "train": [t for i, t in enumerate(tasks) if i not in val],
        "validation": [t for i, t in enumerate(tasks) if i in val],
    }
    counts = {}
    for name, chosen in splits.items():
        if chosen:
            write_parquet([task_row(t, config, settings, data_source) for t in chosen], Path(out) / f"{name}.parquet")
            counts[name] = len(chosen)
    return counts
