"""The viewer's data layer and routes without a browser: lazy reads on a run of thousands of rollouts, 404s,
read-only routes, loopback by default."""

from __future__ import annotations

import pytest
from swebox.scripts.viewer import data as view_data
from swebox.scripts.viewer.app import create_app, diff_lines, marked
from swebox.trainers.run.trajectories import TrajectoryWriter, step_file

STEPS, PER_STEP = 50, 64


@pytest.fixture(scope="module")
def big_run(tmp_path_factory):
    run = tmp_path_factory.mktemp("big") / "run"
    writer = TrajectoryWriter(run)
    for step in range(1, STEPS + 1):
        records = [
            {
                "step": step,
                "index": i,
                "task_id": f"task-{i % 16}",
                "group_id": f"g{i // 4}",
                "reward": float(i % 4 == 0),
                "advantage": 0.5,
                "valid": True,
                "resolved": i % 4 == 0,
                "failed": i == 7,
                "truncated": False,
                "num_turns": 2,
                "reason": "submitted",
                "prompt": [],
                "turns": [
                    {
                        "text": "x",
                        "action": None,
                        "format_error": True,
                        "observation": "o",
                        "exit_code": None,
                        "timed_out": False,
                    }
                ],
                "diff": "",
                "grade": None,
                "metrics": {"env/format_errors": 1.0 if i % 2 else 0.0},
            }
            for i in range(PER_STEP)
        ]
        writer.write(step, records)
    (run / "metrics.jsonl").write_text("".join(f'{{"step": {s}, "reward/mean": 0.25}}\n' for s in range(1, STEPS + 1)))
    return run


def test_the_run_page_and_its_filters_read_no_step_file(big_run, monkeypatch):
    opened = []
    real = view_data.read_jsonl
    monkeypatch.setattr(view_data, "read_jsonl", lambda path: opened.append(path.name) or real(path))
    client = create_app(big_run).test_client()
    page = client.get("/").get_data(as_text=True)
    assert f"{STEPS * PER_STEP} rollouts; page 1 of {-(-STEPS * PER_STEP // 100)}" in page
    assert client.get("/?filter=resolved&page=3").status_code == 200
    assert f"{STEPS * 16} rollouts" in client.get("/?filter=resolved").get_data(as_text=True)
    assert f"{STEPS} rollouts" in client.get("/?filter=errors").get_data(as_text=True)
    assert f"{STEPS * 4} rollouts matching" in client.get("/?q=TASK-3").get_data(as_text=True)
    assert sorted(set(opened)) == ["index.jsonl", "metrics.jsonl"]  # parsed once each, step files never
    assert opened.count("index.jsonl") == 1
    client.get(f"/rollout/7/{PER_STEP - 1}")
    assert step_file(big_run, 7).name in opened and len({n for n in opened if n.startswith("step_")}) == 1


def test_unknown_pages_404_and_nothing_but_reads_is_routed(big_run):
    client = create_app(big_run).test_client()
    assert client.get("/step/999").status_code == 404
    assert client.get("/rollout/1/999").status_code == 404
    assert client.get("/task/no-such-task").status_code == 404
    for method in (client.post, client.put, client.delete):
        assert method("/").status_code == 405
    response = client.get("/")
    assert "default-src 'self'" in response.headers["Content-Security-Policy"]


def test_a_missing_run_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="expected a run folder or an eval --out file"):
        create_app(tmp_path / "nope")


def test_diff_and_truncation_marks():
    kinds = [k for k, _ in diff_lines("diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n c\n")]
    assert kinds == ["meta", "meta", "meta", "hunk", "del", "add", "ctx"]
    pieces = marked("head\n[... 120 characters cut from the middle of the output ...]\ntail")
    assert [m for m, _ in pieces] == [False, True, False]


def test_the_command_binds_loopback_by_default():
    from swebox.scripts.cli import build_parser

    args = build_parser().parse_args(["view", "runs/demo"])
    assert (args.host, args.port) == ("127.0.0.1", 8765)


def test_search_tree_of_plain_and_damaged_records():
    from swebox.scripts.viewer.tree import ORACLE_LABEL, action_summary, search_tree

    assert search_tree({"turns": []}) is None and search_tree({"search": {"tree": []}}) is None
    nodes = [
        {"index": 0, "parent": None, "forked_at": 0, "status": "pruned", "attempt": -1},
        {"index": 1, "parent": 0, "forked_at": 2, "status": "ended", "attempt": 0},
        {"index": 5, "parent": 9, "forked_at": 1, "status": "ended", "attempt": 7},
    ]  # parent and attempt gone
    tree = search_tree(
        {
            "search": {
                "tree": nodes,
                "attempts": [{"index": 1, "resolved": True}],
                "picked": 0,
                "chosen": [0, 1],
                "oracle": True,
                "rule": "oracle",
            }
        }
    )
    assert tree["rule"] == ORACLE_LABEL and tree["picked_line"] == 1 and tree["pruned"] == 1
    assert [r["node"]["index"] for r in tree["roots"]] == [0, 5]  # a line whose parent is missing still shows
    assert tree["roots"][0]["chosen"] and tree["roots"][0]["children"][0]["picked"]
    assert tree["roots"][1]["attempt"] is None
    assert action_summary({"action": None}) == "format error: no action"
    assert action_summary({"action": {"tool": "bash", "arguments": {"command": "ls\npwd"}}}) == "bash: ls"
    assert action_summary({"action": {"tool": "submit", "arguments": {}}}) == "submit"


def test_a_harness_turn_shows_each_tool_call_with_its_result(tmp_path):
    calls = [
        {"tool": "bash", "arguments": {"command": "git apply fix.diff"}, "id": "c0", "observation": "<rc>0</rc>"},
        {"tool": "bash", "arguments": {"command": "git log --all"}, "id": "c1", "observation": "1234 the fix"},
    ]
    turn = {"turn": 1, "text": "", "action": {k: calls[0][k] for k in ("tool", "arguments", "id")}}
    turn.update(observation="<rc>0</rc>\n1234 the fix", exit_code=None, timed_out=False, tool_calls=calls)
    unread = {"turn": 2, "text": "<tool_call>{", "action": None, "observation": "", "exit_code": None}
    unread.update(timed_out=False, parse_error="tool call 0 is not JSON: Expecting value")
    record = {"step": 1, "index": 0, "task_id": "t", "reward": 0.0, "num_turns": 2, "turns": [turn, unread]}
    record["diff"] = ""
    TrajectoryWriter(tmp_path / "run").write(1, [{**record, "reason": "submitted", "prompt": [], "grade": None}])
    page = create_app(tmp_path / "run").test_client().get("/rollout/1/0").get_data(as_text=True)
    assert "tool call 1: <code>bash</code>" in page and "tool call 2: <code>bash</code>" in page
    assert "git log --all" in page and "1234 the fix" in page
    assert "turn 1: bash &times;2" in page  # the turn list counts the reply's calls
    assert "turn 2: format error" in page and "tool call 0 is not JSON: Expecting value" in page
