"""Metrics out of a run: ``metrics.jsonl`` (always) and wandb (online with a key, offline without).

Every step appends one JSON object ``{"step": ..., "time": ..., "<namespace>/<name>": value, ...}`` to
``<run_dir>/metrics.jsonl`` and flushes it, so a crashed run keeps every step it finished. The same values
go to wandb. Metric names are stable and slash-namespaced; docs/metrics.md lists and defines them.

A resumed run (``resume_step``) keeps the lines up to its checkpoint and gives wandb every one of them again
that the wandb run does not have yet: wandb's offline writer (a separate process) may lose whatever it had not
written when the trainer was killed, and each offline process writes a new folder, so the resumed run's folder
is backfilled from metrics.jsonl and holds the whole history (sync only that folder). Online, wandb resumes the
run at its last step and only the steps after it are backfilled.
"""

from __future__ import annotations

import json
import math
import os
import re
import secrets
import string
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from swebox.envs.episodes.episode_config import METRIC_NAMES

if TYPE_CHECKING:
    from .config_infra import LoggingConfig

# The names every training step logs (docs/metrics.md); env/* adds the environment's own metrics.
STEP_METRICS = (
    "reward/mean",
    "reward/std",
    "reward/resolved_rate",
    "reward/frac_zero_std_groups",
    "policy/loss",
    "policy/kl",
    "policy/clip_frac",
    "policy/entropy",
    "policy/grad_norm",
    "policy/lr",
    "tokens/response_len_mean",
    "tokens/response_len_max",
    "tokens/truncated_frac",
    "throughput/tokens_per_s",
    "throughput/episodes_per_s",
    "timing/rollout_s",
    "timing/generate_s",
    "timing/env_s",
    "timing/grade_s",
    "timing/update_s",
    "timing/sync_s",
    "timing/step_s",
    "timing/grade_wait_s",
)
ENV_METRICS = METRIC_NAMES
"""The per-episode env/* names, as the episode layer defines them (one list, not a copy: docs/metrics.md)."""
ROLLOUT_COLUMNS = ("task_id", "reward", "resolved", "turns", "final_diff", "last_observation")
"""Columns of the wandb Table ``rollouts`` (logging.wandb_rollouts_every)."""
METRICS_FILE = "metrics.jsonl"
WANDB_ID_FILE = "wandb_run_id"
_NAME = re.compile(r"^[a-z][a-z0-9_]*(/[a-z0-9_.@-]+)+$")


def measured(name: str) -> bool:
    """Whether a metrics.jsonl field is a measurement of the host (clocks: ``time``, ``timing/*``, ``*_s``,
    ``throughput/*``; memory and disk: ``*_mb``) rather than a number the run's seed pins (docs/training.md,
    "What the seed pins")."""
    return name == "time" or name.startswith(("timing/", "throughput/")) or name.endswith(("_s", "_mb"))


def resolve_wandb_mode(setting: str, environ: Mapping[str, str] = os.environ) -> str:
    """``auto`` -> ``WANDB_MODE`` when set, else ``online`` with ``WANDB_API_KEY`` and ``offline`` without."""
    if setting not in ("auto", "online", "offline", "disabled"):
        raise ValueError(f"expected a wandb mode in auto/online/offline/disabled; found {setting!r}; set logging.wandb")
    if setting != "auto":
        return setting
    if environ.get("WANDB_MODE") in ("online", "offline", "disabled"):
        return environ["WANDB_MODE"]
    return "online" if environ.get("WANDB_API_KEY") else "offline"


def system_metrics_on(setting: str, mode: str) -> bool:
    """Whether a wandb run samples system metrics and captures the console: ``auto`` is on for online runs only."""
    if setting not in ("auto", "on", "off"):
        raise ValueError(f"expected logging.wandb_system in auto/on/off; found {setting!r}")
    return setting == "on" or (setting == "auto" and mode == "online")


def _json_value(name: str, value: Any) -> float | int | None:
    if hasattr(value, "item"):  # a 0-d tensor or numpy scalar
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"metric {name!r}: expected a number; found {type(value).__name__} {value!r}")
    # NaN/inf are not JSON: written as null so that every line stays parseable by any JSON reader
    return value if math.isfinite(value) else None


def read_metrics(run_dir: str | Path) -> list[dict[str, Any]]:
    """The records of ``<run_dir>/metrics.jsonl`` in order (a torn last line from a crash is skipped)."""
    path = Path(run_dir) / METRICS_FILE
    records = []
    for line in path.read_text().splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return records


class Tracker:
    """Logs one record per step to ``metrics.jsonl`` and, unless disabled, to a wandb run.

    ``resume_step``: the run continues from a checkpoint at that step; records of later steps (logged
    after the checkpoint, before the crash) are dropped from metrics.jsonl and the wandb run is resumed.
    Without it the run starts afresh and an existing metrics.jsonl is replaced.
    """

    def __init__(
        self,
        run_dir: str | Path,
        config: Mapping[str, Any] | None = None,
        project: str = "swebox",
        run_name: str = "",
        mode: str = "auto",
        entity: str = "",
        tags: Sequence[str] = (),
        resume_step: int | None = None,
        echo=print,
        group: str = "",
        job_type: str = "",
        system: str = "auto",
    ) -> None:
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.metrics_path = self.run_dir / METRICS_FILE
        kept: list[dict[str, Any]] = []
        if resume_step is not None and self.metrics_path.exists():
            kept = [r for r in read_metrics(self.run_dir) if r.get("step", 0) <= resume_step]
            self.metrics_path.write_text("".join(json.dumps(r) + "\n" for r in kept))
        self._file = open(self.metrics_path, "a" if resume_step is not None else "w")  # noqa: SIM115
        self.mode = resolve_wandb_mode(mode)
        self.run = None
        self.sync_dir: Path | None = None
        self.group, self.job_type = group, job_type
        self.system = system_metrics_on(system, self.mode)
        if self.mode != "disabled":
            self._start_wandb(config, project, run_name or self.run_dir.name, entity, tags, resume_step, echo)
            self._backfill(kept)

    @classmethod
    def for_run(
        cls,
        logging: LoggingConfig,
        run_dir: str | Path,
        config: Mapping[str, Any],
        job_type: str,
        *,
        run_name: str = "",
        resume_step: int | None = None,
        echo=print,
    ) -> Tracker:
        """The tracker of one job of a run (``job_type``: grpo, sft, eval) with the run's ``logging`` settings;
        ``run_name`` overrides ``logging.run_name``."""
        return cls(
            run_dir,
            config,
            logging.project,
            run_name or logging.run_name,
            logging.wandb,
            logging.wandb_entity,
            logging.tags,
            resume_step,
            echo=echo,
            group=logging.group,
            job_type=job_type,
            system=logging.wandb_system,
        )

    def _start_wandb(self, config, project, name, entity, tags, resume_step, echo) -> None:
        import wandb

        id_file = self.run_dir / WANDB_ID_FILE
        if resume_step is not None and id_file.exists():
            run_id = id_file.read_text().strip()
        else:
            run_id = "".join(secrets.choice(string.ascii_lowercase + string.digits) for _ in range(8))
            id_file.write_text(run_id + "\n")
        options = dict(
            project=project,
            name=name,
            entity=entity or None,
            tags=list(tags) or None,
            config=dict(config or {}),
            dir=str(self.run_dir),
            id=run_id,
            resume="allow",
            mode=self.mode,
            group=self.group or None,
            job_type=self.job_type or None,
            # online: the system metrics GPU users rely on and the console in the run's Logs tab; offline (CPU
            # boxes, tests) no sampler process and stdout stays the program's own (system_metrics_on)
            settings=wandb.Settings(
                console="wrap" if self.system else "off", x_disable_stats=not self.system, silent=True
            ),
        )
        # a killed trainer's wandb service can outlive it and keep holding the run ("run ID ... is in use"):
        # online, a resume waits for it to let go; offline, where every resume writes a new folder anyway and
        # the backfill gives that folder every step, it takes a fresh run id after a short wait
        deadline = time.monotonic() + (5 if self.mode == "offline" else 60)
        while True:
            try:
                self.run = wandb.init(**options)
                break
            except Exception as exc:
                if "is in use" not in str(exc):
                    raise
                if time.monotonic() > deadline:
                    if self.mode != "offline":
                        raise
                    options["id"] = "".join(secrets.choice(string.ascii_lowercase + string.digits) for _ in range(8))
                    id_file.write_text(options["id"] + "\n")
                    echo(
                        f"wandb: run {run_id} is still held by the killed process's service; this offline "
                        f"run continues as {options['id']} (every step backfilled from metrics.jsonl)"
                    )
                    deadline = time.monotonic() + 60
                time.sleep(1.0)
        self.sync_dir = Path(self.run.settings.sync_dir)
        if self.mode == "offline":
            echo(f"wandb offline run: {self.sync_dir}  (upload later with: wandb sync {self.sync_dir})")
        else:
            echo(f"wandb run: {self.run.url}")

    def _backfill(self, records: Sequence[Mapping[str, Any]]) -> None:
        """Send wandb the kept records of a resumed run from the step it resumed at (0 for a new offline
        folder) on."""
        first = int(getattr(self.run, "step", 0) or 0)
        for record in records:
            if int(record["step"]) >= first:
                self._wandb_log(int(record["step"]), {k: v for k, v in record.items() if k not in ("step", "time")})

    def _wandb_log(self, step: int, values: Mapping[str, Any]) -> None:
        self.run.log({k: v for k, v in values.items() if v is not None}, step=step)

    def log(self, step: int, metrics: Mapping[str, Any]) -> dict[str, Any]:
        """Append the step's record to metrics.jsonl (flushed) and send it to wandb; returns the record."""
        for name in metrics:
            if not _NAME.match(name):
                raise ValueError(
                    f"expected a slash-namespaced metric name like 'reward/mean'; found {name!r}; "
                    "use the names of docs/metrics.md"
                )
        values = {name: _json_value(name, v) for name, v in metrics.items()}
        record = {"step": int(step), "time": round(time.time(), 3), **values}
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()
        if self.run is not None:
            self._wandb_log(int(step), values)
        return record

    def log_table(
        self, name: str, columns: Sequence[str], rows: Sequence[Sequence[Any]], step: int | None = None
    ) -> None:
        """A wandb Table (nothing without a wandb run; metrics.jsonl and the trajectory files stay the record)."""
        if self.run is None:
            return
        import wandb

        table = wandb.Table(columns=list(columns), data=[list(r) for r in rows])
        self.run.log({name: table}, step=None if step is None else int(step))

    def log_rollouts(self, step: int, records: Sequence[Mapping[str, Any]], max_chars: int = 2000) -> None:
        """The step's rollouts as the wandb Table ``rollouts`` (long text cut to ``max_chars``)."""

        def cut(text: Any) -> str:
            text = str(text or "")
            return text if len(text) <= max_chars else text[: max_chars // 2] + "\n[...]\n" + text[-max_chars // 2 :]

        rows = [
            (
                r["task_id"],
                r["reward"],
                r["resolved"],
                r["num_turns"],
                cut(r.get("diff")),
                cut(r["turns"][-1]["observation"] if r.get("turns") else ""),
            )
            for r in records
        ]
        self.log_table("rollouts", ROLLOUT_COLUMNS, rows, step)

    def finish(self) -> None:
        """Close metrics.jsonl and the wandb run (offline: its folder is complete for `wandb sync`)."""
        if not self._file.closed:
            self._file.close()
        if self.run is not None:
            self.run.finish()
            self.run = None

    def __enter__(self) -> Tracker:
        return self

    def __exit__(self, *exc) -> None:
        self.finish()
