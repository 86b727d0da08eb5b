"""``swebox view RUN_DIR``: a local, read-only web page over a training run's trajectories or an eval output.

Flask (routing, Jinja2 templates with autoescaping, Werkzeug's threaded server) serves five kinds of page: the
run (charts of reward, resolved rate and the env time breakdown per step; the steps; every rollout with
filters and a task id search, paginated), a step (its groups, rewards, advantages, identical diffs grouped), a
rollout (every turn, the final diff, the grade report; a search's tree when the record has one), a task
(statement, gold patch, every rollout of it) and a page of what could not be read. Everything (templates,
CSS) comes from this package; the pages load no external asset and run no script, so they work offline. Only
GET and HEAD are routed: nothing is written.
"""

from __future__ import annotations

import argparse
import ipaddress
import re
from pathlib import Path
from typing import Any

from swebox.scripts.viewer import charts
from swebox.scripts.viewer.data import FILTERS, RunData, diff_groups
from swebox.scripts.viewer.tree import action_summary, search_tree

PAGE_SIZE = 100
CUT = re.compile(
    r"(\[\.\.\. \d+ characters cut from the middle of the output \.\.\.\]|"
    r"\[The output passed the sandbox's byte limit[^\]]*\]|\[The episode ended:[^\]]*\])"
)
TIME_PARTS = ("timing/generate_s", "timing/env_s", "timing/grade_s", "timing/update_s", "timing/sync_s")


def add_arguments(subparsers: argparse._SubParsersAction) -> None:
    view = subparsers.add_parser("view", help="a local web page over a run's trajectories or an eval output")
    view.add_argument("run", help="a training run folder (logging.run_dir), or a `swebox eval --out` file")
    view.add_argument("--port", type=int, default=8765, help="port (default 8765; 0 picks a free one)")
    view.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    view.add_argument(
        "--tasks",
        default="",
        help="tasks.jsonl for the task pages' statements and gold patches (default: the run's config.yaml env.tasks)",
    )
    view.add_argument(
        "--calibration",
        default="",
        help="a `swebox tasks calibrate` file for the task pages (default: the run's config.yaml env.calibration)",
    )
    view.set_defaults(func=run)


def diff_lines(diff: str) -> list[tuple[str, str]]:
    """(css class, line) of a unified diff."""
    out = []
    lines = (diff or "").split("\n")  # git's lines: str.splitlines also breaks on \f, \x85, ...
    for line in lines[:-1] if lines[-1] == "" else lines:
        if line.startswith(("diff --git", "index ", "--- ", "+++ ", "new file", "deleted file")):
            kind = "meta"
        elif line.startswith("@@"):
            kind = "hunk"
        elif line.startswith("+"):
            kind = "add"
        elif line.startswith("-"):
            kind = "del"
        else:
            kind = "ctx"
        out.append((kind, line))
    return out


def marked(text: str) -> list[tuple[bool, str]]:
    """The observation split into (is a truncation/limit mark, text) pieces."""
    return [(bool(CUT.fullmatch(piece)), piece) for piece in CUT.split(text or "") if piece]


def cost_fields(cost: Any) -> dict[str, Any]:
    """A record's ``cost`` with only what the page can show: numbers, and ``source`` as text (a damaged or
    hand-made record must not break the page)."""
    if not isinstance(cost, dict):
        return {}
    return {
        k: v
        for k, v in cost.items()
        if (k == "source" and isinstance(v, str)) or (isinstance(v, (int, float)) and not isinstance(v, bool))
    }


def create_app(run_path: str | Path, tasks_file: str | Path | None = None, calibration_file: str | Path | None = None):
    from flask import Flask, abort, render_template, request

    data = RunData(run_path, tasks_file, calibration_file)
    app = Flask(__name__, static_folder="static", template_folder="templates")
    app.jinja_env.globals.update(
        filters=list(FILTERS), run=data, diff_lines=diff_lines, marked=marked, action_summary=action_summary
    )

    def page(rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], int, int]:
        pages = max(1, -(-len(rows) // PAGE_SIZE))
        number = min(max(1, request.args.get("page", 1, type=int)), pages)
        return rows[(number - 1) * PAGE_SIZE : number * PAGE_SIZE], number, pages

    @app.get("/")
    def run_page():
        steps = data.steps()
        logged = [s for s in steps if s["metrics"]]
        xs = [s["step"] for s in logged]
        reward = charts.line_chart(
            "reward/mean and reward/resolved_rate",
            xs,
            {
                "reward/mean": [s["metrics"].get("reward/mean") for s in logged],
                "resolved_rate": [s["metrics"].get("reward/resolved_rate") for s in logged],
            },
            lo=0.0,
        )
        timing = charts.stacked_bars(
            "time per step by part (s)",
            xs,
            {
                name.removeprefix("timing/"): [float(s["metrics"].get(name) or 0.0) for s in logged]
                for name in TIME_PARTS
            },
        )
        filter_name, query = request.args.get("filter", ""), request.args.get("q", "").strip()
        matching = data.rows(filter_name, query)
        rows, number, pages = page(matching)
        calibration, calibration_file, calibration_problems = data.calibration()
        problems = data.metrics().problems + data.index().problems + calibration_problems
        usable = sum(not c["unusable"] for c in calibration.values())
        return render_template(
            "run.html",
            steps=steps,
            reward_chart=reward,
            timing_chart=timing,
            rows=rows,
            filter_name=filter_name,
            query=query,
            page=number,
            pages=pages,
            total=len(matching),
            problems=problems,
            calibration=calibration,
            calibration_file=calibration_file,
            usable=usable,
            flaky=sum(bool(c["flaky_tests"]) for c in calibration.values()),
        )

    @app.get("/step/<int:step>")
    def step_page(step: int):
        loaded = data.step_records(step)
        known = {s["step"]: s for s in data.steps()}
        if not loaded.records and step not in known:
            abort(404)
        groups: dict[str, list[dict[str, Any]]] = {}
        for r in loaded.records:
            groups.setdefault(str(r.get("group_id") or r.get("task_id")), []).append(r)
        metrics = known.get(step, {}).get("metrics", {})
        return render_template(
            "step.html",
            step=step,
            groups=groups,
            letters=diff_groups(loaded.records),
            metrics=metrics,
            problems=loaded.problems,
        )

    @app.get("/rollout/<int:step>/<int:index>")
    def rollout_page(step: int, index: int):
        record, problems = data.rollout(step, index)
        if record is None:
            return render_template("missing.html", what=f"rollout {index} of step {step}", problems=problems), 404
        grade = record.get("grade") or {}
        return render_template(
            "rollout.html",
            r=record,
            step=step,
            grade=grade,
            problems=problems,
            tree=search_tree(record),
            cost=cost_fields(record.get("cost")),
        )

    @app.get("/task/<path:task_id>")
    def task_page(task_id: str):
        rows = data.rows(query="")
        rows = [r for r in rows if r.get("task_id") == task_id]
        info = data.task(task_id)
        if not info["problem_statement"] and rows:  # no task file: the statement as the prompt showed it
            record, _ = data.rollout(int(rows[0].get("step", 0)), int(rows[0].get("index", 0)))
            prompt = (record or {}).get("prompt") or []
            info["problem_statement"] = prompt[-1]["content"] if prompt else ""
        calibration, calibration_file, problems = data.calibration()
        if not rows and not info["source"] and task_id not in calibration:
            abort(404)
        return render_template(
            "task.html",
            task=info,
            rows=rows,
            cal=calibration.get(task_id),
            calibration_file=calibration_file,
            problems=problems,
        )

    @app.after_request
    def read_only_headers(response):
        # the pages use nothing from elsewhere: say so to the browser as well
        response.headers["Content-Security-Policy"] = "default-src 'self'; style-src 'self'; img-src 'self' data:"
        response.headers["X-Content-Type-Options"] = "nosniff"
        return response

    return app


def make_server(
    run_path: str | Path,
    host: str = "127.0.0.1",
    port: int = 8765,
    tasks_file: str | Path | None = None,
    calibration_file: str | Path | None = None,
):
    """A threaded Werkzeug server for the viewer (``.serve_forever()``, ``.shutdown()``, ``.port``)."""
    from werkzeug.serving import make_server as werkzeug_server

    return werkzeug_server(host, port, create_app(run_path, tasks_file, calibration_file), threaded=True)


def run(args: argparse.Namespace) -> int:
    try:
        server = make_server(args.run, args.host, args.port, args.tasks or None, args.calibration or None)
    except FileNotFoundError as exc:
        raise SystemExit(str(exc)) from None
    try:
        loopback = ipaddress.ip_address(args.host).is_loopback
    except ValueError:
        loopback = args.host == "localhost"
    if not loopback:
        print(f"warning: --host {args.host} serves the run's trajectories to other machines too")
    print(f"swebox view: http://{args.host}:{server.port}/  ({args.run}; Ctrl-C to stop)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0
