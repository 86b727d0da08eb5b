"""``swebox eval``'s options that score given diffs instead of playing a policy, and its search options.

``--predictions P``: SWE-bench predictions graded with each task's grader, the harness's report
(envs/tasks/predictions.py); ``--verify RECORDS``: recorded diffs graded again, verdicts compared
(envs/tasks/graders/verify.py); ``--instance-ids``/``--limit``: which tasks (envs/tasks/selection.py);
``--samples``/``--best-of``/``--search``: search at inference (trainers/evaluation/eval_search.py, which needs the
``train`` extra: :func:`add_search_options` is added by scripts/train_cli.py only). The library modules hold the
work; this module parses, prints and chooses the exit status.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from swebox.envs.tasks import selection
from swebox.envs.tasks.graders.verify import read_records, verify_record
from swebox.envs.tasks.instance_logs import log_root, write_instance_logs
from swebox.envs.tasks.predictions import (
    Outcome,
    PredictionError,
    chosen_predictions,
    evaluate,
    instance_entry,
    load_predictions,
    report_name,
    run_report,
    shown,
    write_report_or_reason,
)

if TYPE_CHECKING:
    from swebox.trainers.evaluation.eval_search import SearchOptions


def add_score_options(p: argparse.ArgumentParser) -> None:
    """``--predictions`` (and its report's options), ``--verify``, ``--instance-ids`` and ``--limit`` of ``swebox eval``
    (``--tasks`` and ``--layers`` come with the parser)."""
    p.add_argument(
        "--predictions",
        default="",
        help="score SWE-bench predictions (instance_id, "
        "model_name_or_path, model_patch; .json or .jsonl) with each task's grader",
    )
    p.add_argument(
        "--run-id", default="swebox", help="with --predictions: names the report <model>.<run-id>.json (default swebox)"
    )
    p.add_argument("--jobs", type=int, default=1, help="with --predictions: patches graded at once (default 1)")
    p.add_argument("--timeout", type=float, default=1800.0, help="with --predictions: seconds per test run")
    p.add_argument(
        "--instance-ids",
        nargs="+",
        default=[],
        metavar="ID",
        help="only these tasks (space separated, as SWE-bench's --instance_ids); an id the dataset "
        "lacks is refused before anything runs",
    )
    p.add_argument("--limit", type=int, default=0, help="only the first N tasks (after --instance-ids; 0: all)")
    p.add_argument(
        "--verify",
        default="",
        help="grade the diffs of recorded episodes (eval --out lines, "
        "trajectories/step_*.jsonl.gz) again and say whether each verdict is the same",
    )


def run_scoring(args: argparse.Namespace) -> int:
    """``swebox eval --predictions P --tasks T``: grade, print one line per instance, write the report."""
    from swebox.envs.tasks.loaders import LoadError, load
    from swebox.envs.tasks.validate import StoreLayers, is_layer_store, layers_flag_error, layers_from_dirs

    if args.verify:  # swebox eval --verify RECORDS: re-grade recorded diffs (verify.py)
        return run_verify(args)
    if not args.predictions:
        print("error: --predictions: expected a predictions file (.json or .jsonl); found none.", file=sys.stderr)
        return 2
    try:
        preds = load_predictions(args.predictions)
        dataset = list(load(args.tasks))
        preds = chosen_predictions(preds, dataset, args.predictions, args.tasks)
        tasks = {t.instance_id: t for t in selection.select(dataset, args.instance_ids, args.limit, args.tasks)}
        preds = [p for p in preds if p.instance_id in tasks]
    except (PredictionError, LoadError, selection.SelectionError) as exc:
        # the ids in a SelectionError are escaped already (selection._named): not twice
        print(f"error: {exc if isinstance(exc, selection.SelectionError) else shown(exc)}", file=sys.stderr)
        return 2
    if args.jobs < 1:
        print(f"error: --jobs: expected a number >= 1; found {args.jobs}.", file=sys.stderr)
        return 2
    layers = args.layers or os.environ.get("SWEBOX_LAYER_STORE", "runs/layers")
    if layers_flag_error(layers):
        print(f"error: {layers_flag_error(layers)}", file=sys.stderr)
        return 2
    resolver = StoreLayers(layers) if is_layer_store(layers) else layers_from_dirs(layers)

    graded: list[Outcome] = []
    out = Path(args.out or report_name(preds[0].model_name_or_path if preds else "none", args.run_id))

    def show(o: Outcome) -> None:
        graded.append(o)
        root = log_root(out, args.run_id, o.prediction.model_name_or_path)
        write_instance_logs(
            root,
            o.prediction.instance_id,
            o.prediction.model_patch,
            instance_entry(o, tasks),
            o.report.output_tail if o.report else "",
        )
        why = o.error or ("; ".join(o.report.errors[:2]) if o.report else "")
        print(f"{shown(o.prediction.instance_id):<40} {o.kind:<12} {shown(why)}", flush=True)

    try:
        outcomes = evaluate(preds, tasks, resolver, jobs=args.jobs, timeout=args.timeout, on_result=show)
    except KeyboardInterrupt:
        # what was graded is kept: a report of those instances, then the process ends at once (a grading run
        # in flight cannot be interrupted; its sandbox dies with the process)
        written = write_report_or_reason(out, run_report(list(graded), tasks))
        print(
            f"interrupted: {len(graded)} of {len(preds)} graded; "
            + (f"their report: {out}" if written is None else f"no report ({written})"),
            file=sys.stderr,
            flush=True,
        )
        sys.stdout.flush()
        os._exit(130)
    finally:
        if isinstance(resolver, StoreLayers):
            resolver.close()
    report = run_report(outcomes, tasks)
    error = write_report_or_reason(out, report)
    if error is not None:
        print(f"error: {error}", file=sys.stderr)
        return 1
    logs = log_root(out, args.run_id, preds[0].model_name_or_path if preds else "none")
    print(
        f"submitted {report['submitted_instances']}, completed {report['completed_instances']}, resolved "
        f"{report['resolved_instances']}, unresolved {report['unresolved_instances']}, empty patch "
        f"{report['empty_patch_instances']}, error {report['error_instances']}; report: {shown(out)}; "
        f"per-instance logs: {shown(logs)}/<instance_id>/"
    )
    return 0


def run_verify(args: argparse.Namespace) -> int:
    """``swebox eval --verify RECORDS``: one line per record: same / DIFFERENT (or error), the verdicts and the
    provenance differences; exit 0 when every verdict is the same, 1 otherwise, 2 on bad input."""
    from swebox.envs.tasks.loaders import LoadError, load
    from swebox.envs.tasks.validate import StoreLayers, is_layer_store, layers_from_dirs

    try:
        records = read_records(args.verify)
        tasks = {t.instance_id: t for t in load(args.tasks)}
    except (OSError, ValueError, LoadError) as exc:
        print(f"error: --verify: {exc}", file=sys.stderr)
        return 2
    layers = args.layers or os.environ.get("SWEBOX_LAYER_STORE", "runs/layers")
    resolver = StoreLayers(layers) if is_layer_store(layers) else layers_from_dirs(layers)
    results = []
    try:
        for record in records:
            v = verify_record(record, tasks, resolver, timeout=args.timeout)
            results.append(v)
            verdict = "error" if v.error else ("same" if v.same else "DIFFERENT")
            print(
                f"{ascii(v.task_id)[1:-1]:<40} {verdict:<9} recorded {v.recorded} now {v.now} "
                f"{v.error}{'; '.join(v.differences)}",
                flush=True,
            )
    finally:
        if isinstance(resolver, StoreLayers):
            resolver.close()
    same = sum(v.same for v in results)
    print(f"verified {len(results)}: same {same}, different {len(results) - same}")
    return 0 if same == len(results) else 1


def add_search_options(ev: argparse.ArgumentParser) -> None:
    """The search options of ``swebox eval`` (:func:`search_options` reads them)."""
    from swebox.envs.search import BUILTIN_RULES

    group = ev.add_argument_group("search at inference (docs/envs.md)")
    group.add_argument(
        "--samples",
        type=int,
        default=0,
        metavar="N",
        help="N attempts per task from one prepared start state: report pass@k for k <= N",
    )
    group.add_argument(
        "--best-of",
        type=int,
        default=0,
        metavar="N",
        help="N attempts per task, keep the one --select picks: report best-of-N (and pass@k)",
    )
    group.add_argument(
        "--select",
        default="visible_tests",
        metavar="RULE",
        help=f"how best-of-N and beam pick: {', '.join(BUILTIN_RULES)} (labelled the oracle: it "
        "reads the hidden tests) or MODULE:FUNCTION (default visible_tests)",
    )
    group.add_argument(
        "--search",
        choices=("beam",),
        default=None,
        help="branch mid-episode: a beam over tool calls (--width, --depth)",
    )
    group.add_argument("--width", type=int, default=2, help="beam width: children per line and lines kept")
    group.add_argument("--depth", type=int, default=2, help="beam depth: turns at which lines branch")
    group.add_argument("--max-search-turns", type=int, default=0, help="turns per task over all its lines (0: none)")
    group.add_argument("--max-sandboxes", type=int, default=0, help="sandboxes alive at once per task (0: none)")
    group.add_argument("--search-wall-s", type=float, default=0.0, help="seconds per task's search (0: none)")


def search_options(args: argparse.Namespace) -> SearchOptions:
    """The search ``swebox eval`` was asked for (all zeros: one episode per task)."""
    from swebox.trainers.evaluation.eval_search import SearchOptions

    return SearchOptions(
        samples=args.samples,
        best_of=args.best_of,
        select=args.select,
        search=args.search,
        width=args.width,
        depth=args.depth,
        max_search_turns=args.max_search_turns,
        max_sandboxes=args.max_sandboxes,
        search_wall_s=args.search_wall_s,
        parallel=args.parallel,
    )
