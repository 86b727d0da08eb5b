"""``swebox eval --out`` never loses work: whole records on a full disk, resume on a rerun, Ctrl-C as one line
(unit tests of the records file, and the real command under SIGINT over real sandboxes)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from swebox.envs.cache.durable import append_line, write_atomic
from swebox.trainers.evaluation.eval_records import EvalOut, RecordsError

from tests.trainers.shapes import shapes_files

REPO = Path(__file__).resolve().parents[3]


class T:
    def __init__(self, iid: str) -> None:
        self.instance_id = iid


def lines(path: Path) -> list[dict]:
    text = path.read_text()
    assert text == "" or text.endswith("\n"), "a cut last line"
    return [json.loads(line) for line in text.splitlines()]


def test_a_rerun_skips_recorded_ids_and_refuses_another_policy(tmp_path):
    path = tmp_path / "sub" / "out.jsonl"
    out = EvalOut.open(path, "gold")
    assert out.todo([T("a"), T("b")]) and out.previous == {}
    out.append({"instance_id": "a", "resolved": True}, total=2)
    again = EvalOut.open(path, "gold")
    assert [t.instance_id for t in again.todo([T("a"), T("b")])] == ["b"] and again.count == 1
    again.append({"instance_id": "b", "resolved": False}, total=2)
    again.finish({"b": {"instance_id": "b", "resolved": False}}, ["b", "a"])  # rewritten in task order
    assert [r["instance_id"] for r in lines(path)] == ["b", "a"]
    with pytest.raises(RecordsError, match=r"holds records of --policy gold; found --policy empty"):
        EvalOut.open(path, "empty")


def test_a_cut_last_line_is_dropped_and_a_missing_newline_kept(tmp_path):
    path = tmp_path / "out.jsonl"
    path.write_text('{"instance_id": "a"}\n{"instance_id": "b", "resol')  # a writer killed mid-line
    assert list(EvalOut.open(path, "gold").previous) == ["a"]
    assert path.read_text() == '{"instance_id": "a"}\n'
    path.write_text('{"instance_id": "a"}\n{"instance_id": "b"}')  # whole, no newline (written by hand)
    assert list(EvalOut.open(path, "gold").previous) == ["a", "b"] and path.read_text().endswith("}\n")
    path.write_text("not json\n")
    with pytest.raises(RecordsError, match=r"line 1: expected one JSON record; found invalid JSON"):
        EvalOut.open(path, "gold")
    with pytest.raises(RecordsError, match=r"expected a file for the records; found a folder"):
        EvalOut.open(tmp_path, "gold")


FULL_DISK = textwrap.dedent("""
    import resource, signal, sys
    from pathlib import Path
    from swebox.envs.cache.durable import write_atomic
    from swebox.trainers.evaluation.eval_records import EvalOut, RecordsError
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # past the limit a write fails with EFBIG, as on a full disk
    resource.setrlimit(resource.RLIMIT_FSIZE, (1000, 1000))
    out = EvalOut.open(sys.argv[1], "gold")
    try:
        for i in range(100):
            out.append({"instance_id": f"t{i}", "diff": "x" * 150}, total=100)
    except RecordsError as exc:
        print(exc)
    try:
        write_atomic(Path(sys.argv[2]), "y" * 5000)
    except OSError as exc:
        print("report:", exc.strerror)
""")


def test_a_full_disk_leaves_only_whole_records_and_the_old_report(tmp_path):
    # a real short write: the kernel writes up to the file size limit, then fails (EFBIG), as ENOSPC does
    out, report = tmp_path / "out.jsonl", tmp_path / "out.md"
    report.write_text("old table\n")
    proc = subprocess.run(
        [sys.executable, "-c", FULL_DISK, str(out), str(report)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    records = lines(out)
    assert 0 < len(records) < 100 and out.stat().st_size < 1000
    first, second = proc.stdout.splitlines()
    assert first == (
        f"--out {out}: no space left (File too large) with {len(records)} of 100 records written "
        "(all whole); free space and rerun the same command: it resumes"
    )
    assert second == "report: File too large" and report.read_text() == "old table\n"
    assert sorted(os.listdir(tmp_path)) == ["out.jsonl", "out.md"]  # no temporary file left


def test_append_line_cuts_back_a_write_interrupted_half_way(tmp_path, monkeypatch):
    path = tmp_path / "f.jsonl"
    append_line(path, '{"a": 1}')
    real_write = os.write

    def half_then_interrupt(fd, data):  # Ctrl-C between the two halves of one record
        real_write(fd, bytes(data[: len(data) // 2]))
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "write", half_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        append_line(path, '{"b": 2}')
    monkeypatch.undo()
    assert path.read_text() == '{"a": 1}\n'
    write_atomic(path, "whole\n")
    assert path.read_text() == "whole\n"


def test_ctrl_c_during_an_append_takes_effect_once_the_record_is_counted(tmp_path, monkeypatch):
    # Ctrl-C while the line is written but not yet fsynced: the record stays and counts (it used to be cut back
    # by the interrupt, and "interrupted: N" then disagreed with a file the user had seen the line in)
    out = EvalOut.open(tmp_path / "out.jsonl", "gold")
    real_fsync = os.fsync

    def fsync_then_ctrl_c(fd):
        os.kill(os.getpid(), signal.SIGINT)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync_then_ctrl_c)
    with pytest.raises(KeyboardInterrupt):
        out.append({"instance_id": "a"}, total=1)
    monkeypatch.undo()
    assert out.written == 1 and lines(tmp_path / "out.jsonl") == [{"instance_id": "a", "policy": "gold"}]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the handler is given back


def _wait_for(predicate, deadline_s: float, what: str) -> None:
    deadline = time.monotonic() + deadline_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


@pytest.mark.e2e
def test_ctrl_c_keeps_finished_records_and_a_rerun_resumes(shapes_env, tmp_path):
    dirs = shapes_files(shapes_env, tmp_path, 4)
    out = tmp_path / "eval" / "gold.jsonl"
    cmd = [
        sys.executable,
        "-m",
        "swebox.scripts.cli",
        "eval",
        "--tasks",
        str(tmp_path / "tasks.jsonl"),
        "--policy",
        "gold",
        "--layers",
        str(dirs),
        "--out",
        str(out),
        "--parallel",
        "1",
    ]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)
    try:
        _wait_for(
            lambda: out.exists() and out.read_text().count("\n") >= 1 or proc.poll() is not None,
            300,
            "the first record",
        )
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    records = lines(out)
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    said = [line for line in err.splitlines() if line.startswith("interrupted:")]
    assert said == [f"interrupted: {len(records)} of 4 written to {out}"], err
    assert 1 <= len(records) < 4 and all(r["resolved"] and r["policy"] == "gold" for r in records)

    done = {r["instance_id"] for r in records}
    rerun = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO, timeout=600)
    assert rerun.returncode == 0, rerun.stderr
    assert (
        f"resuming: {len(done)} of 4 tasks already recorded in {out}; playing the other {4 - len(done)}" in rerun.stdout
    ), rerun.stdout
    assert "resolved 4/4" in rerun.stdout
    final = lines(out)
    ids = [json.loads(line)["instance_id"] for line in (tmp_path / "tasks.jsonl").read_text().splitlines()]
    assert [r["instance_id"] for r in final] == ids  # task order, each once
    kept = {r["instance_id"]: r for r in final}
    assert all(kept[r["instance_id"]]["total_s"] == r["total_s"] for r in records)  # not played again
    assert (out.parent / "gold.md").read_text().count("| yes |") == 4

    # a different policy into the same file is refused, not mixed in
    other = subprocess.run(
        [*cmd[: cmd.index("gold")], "empty", *cmd[cmd.index("gold") + 1 :]],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=120,
    )
    assert other.returncode == 1 and "Traceback" not in other.stderr
    assert f"--out {out}: holds records of --policy gold; found --policy empty" in other.stderr
    # the empty policy into its own file resolves none: the reward path both ways
    empty = tmp_path / "eval" / "empty.jsonl"
    run = subprocess.run(
        [*cmd[: cmd.index("gold")], "empty", *cmd[cmd.index("gold") + 1 : -4], "--out", str(empty), "--parallel", "2"],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=600,
    )
    assert run.returncode == 0 and "resolved 0/4" in run.stdout, run.stderr
    assert [r["resolved"] for r in lines(empty)] == [False] * 4


@pytest.mark.e2e
def test_a_search_evaluation_resumes_too_and_refuses_another_search(calc_layer, tmp_path, capsys):
    from swebox.envs.tasks import save_jsonl
    from swebox.scripts.cli import main

    from tests.calc import calc_task, layer_dirs

    one, two = tmp_path / "one.jsonl", tmp_path / "two.jsonl"
    save_jsonl([calc_task(instance_id="calc-add-2")], one)
    save_jsonl([calc_task(), calc_task(instance_id="calc-add-2")], two)
    layers = str(layer_dirs(tmp_path, calc_layer))
    out = tmp_path / "s.jsonl"
    search = ["--policy", "gold", "--samples", "2", "--layers", layers, "--out", str(out), "env.max_turns=3"]
    assert main(["eval", "--tasks", str(one), *search]) == 0
    first = lines(out)
    assert [r["instance_id"] for r in first] == ["calc-add-2"] and first[0]["policy"] == "gold --samples 2"
    capsys.readouterr()
    assert main(["eval", "--tasks", str(two), *search]) == 0  # the second task only is searched
    printed = capsys.readouterr().out
    assert f"resuming: 1 of 2 tasks already recorded in {out}; playing the other 1" in printed
    assert "pass@k over 1 tasks: pass@1 1.000, pass@2 1.000" in printed
    assert f"1 tasks recorded in {out} by an earlier run are not in this report" in printed
    final = lines(out)
    assert [r["instance_id"] for r in final] == ["calc-add", "calc-add-2"]  # the task file's order
    assert final[1]["total_s"] == first[0]["total_s"] and all(r["search"]["resolved_count"] == 2 for r in final)
    # another search kind (or a plain evaluation) into the same file is refused, the file untouched
    before = out.read_bytes()
    with pytest.raises(
        SystemExit,
        match=r"holds records of --policy gold --samples 2; found --policy gold "
        r"--best-of 2 --select visible_tests",
    ):
        main(["eval", "--tasks", str(two), *search[:2], "--best-of", "2", *search[4:]])
    assert out.read_bytes() == before
