"""Loaders: every supported format and dataset flavour; bad rows name their index and field."""

from __future__ import annotations

import json
import sys

import pytest
from swebox.envs.tasks import LoadError, Task, load, save_jsonl
from swebox.envs.tasks.adapters import detect
from swebox.envs.tasks.graders.diff_reverse import reverse_diff

FIX = (
    "diff --git a/pkg/m.py b/pkg/m.py\n--- a/pkg/m.py\n+++ b/pkg/m.py\n"
    "@@ -1,2 +1,2 @@\n-return a - b\n+return a + b\n x\n"
)

SWEBENCH = {  # SWE-bench itself stores the id lists as JSON strings; a repo/version swebench has a recipe for
    "instance_id": "owner__proj-12",
    "repo": "psf/requests",
    "base_commit": "a" * 40,
    "patch": FIX,
    "test_patch": "",
    "problem_statement": "add is wrong",
    "hints_text": "",
    "created_at": "2023-01-01T00:00:00Z",
    "version": "2.0",
    "environment_setup_commit": "b" * 40,
    "FAIL_TO_PASS": json.dumps(["tests/test_m.py::test_add"]),
    "PASS_TO_PASS": "[]",
}
SWEGYM = dict(
    SWEBENCH,
    instance_id="owner__proj-13",
    FAIL_TO_PASS=["tests/test_m.py::test_add"],
    PASS_TO_PASS=["tests/test_m.py::test_sub"],
)
SWESMITH = {
    "instance_id": "owner__proj.1fd52536.func_pm_op_swap__abc",
    "repo": "swesmith/mewwts__addict.75284f95",
    "patch": reverse_diff(FIX),
    "FAIL_TO_PASS": ["tests/test_m.py::test_add"],
    "PASS_TO_PASS": [],
    "image_name": "swesmith.x86_64.mewwts__addict.75284f95",
    "problem_statement": "add subtracts",
}
R2E = {
    "repo_name": "proj",
    "docker_image": "ns/proj_final:" + "c" * 40,
    "commit_hash": "c" * 40,
    "parsed_commit_content": json.dumps(
        {
            "old_commit_hash": "d" * 40,
            "new_commit_hash": "c" * 40,
            "file_diffs": [
                {
                    "header": {"file": {"path": "pkg/m.py"}, "misc_line": None},
                    "index_line": {"old_commit_hash": "111", "new_commit_hash": "222", "mode": "100644"},
                    "minus_file": {"path": "a/pkg/m.py"},
                    "plus_file": {"path": "b/pkg/m.py"},
                    "hunks": [
                        {
                            "descriptor": {
                                "old_range": {"start": 1, "length": 2},
                                "new_range": {"start": 1, "length": 2},
                                "section": "",
                            },
                            "line_group": {
                                "all_lines": [
                                    {"content": "return a - b", "type": "deleted"},
                                    {"content": "return a + b", "type": "added"},
                                    {"content": "x", "type": "context"},
                                ]
                            },
                        }
                    ],
                    "old_file_content": "",
                    "new_file_content": "",
                },
                {
                    "header": {"file": {"path": "tests/test_m.py"}},
                    "hunks": [],
                    "old_file_content": "",
                    "new_file_content": "",
                },
            ],
        }
    ),
    "execution_result_content": json.dumps(
        {"test_file_codes": ["def test_add():\n    assert 1\n"], "test_file_names": ["test_1.py"]}
    ),
    "expected_output_json": json.dumps({"TestM.test_add": "PASSED", "test_other": "PASSED", "test_bad": "FAILED"}),
    "problem_statement": "add is wrong",
    "prompt": "contains the gold patch",
    "modified_files": ["pkg/m.py"],
}


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_detects_each_flavour():
    assert [detect(r) for r in (SWEBENCH, SWEGYM, SWESMITH, R2E)] == [
        "swe-bench",
        "swe-bench",
        "swe-smith",
        "r2e-gym",
    ]


def test_swebench_and_swegym_rows(tmp_path):
    tasks = load(write_jsonl(tmp_path / "t.jsonl", [SWEBENCH, SWEGYM]))
    assert [t.instance_id for t in tasks] == ["owner__proj-12", "owner__proj-13"]
    assert tasks[0].FAIL_TO_PASS == ("tests/test_m.py::test_add",) and tasks[0].PASS_TO_PASS == ()
    assert tasks[1].PASS_TO_PASS == ("tests/test_m.py::test_sub",)
    # the env is built at environment_setup_commit, the task starts at base_commit (a checkout layer)
    assert tasks[0].env.source == "git+https://github.com/psf/requests.git" and tasks[0].env.commit == "b" * 40
    assert tasks[0].env.python == "3.9" and tasks[0].metadata["checkout"]["commit"] == "a" * 40
    assert tasks[0].task_layer_key.startswith("task-") and tasks[0].grader == "log"
    assert tasks[0].test_cmd.startswith("pytest -rA") and tasks[0].log_parser == "psf/requests"
    assert tasks.skipped == []


def test_swesmith_patch_is_the_reverse_of_the_bug(tmp_path):
    (task,) = load(write_jsonl(tmp_path / "s.jsonl", [SWESMITH]))
    assert task.patch == FIX and task.bug_patch == SWESMITH["patch"]
    assert task.repo == "mewwts/addict" and task.base_commit == "75284f95"
    assert task.env.commit == "75284f95" and task.env.python == "3.10"  # swesmith's profile
    assert task.hidden_tests and task.test_files == ("tests/test_m.py",) and task.task_layer_key
    assert task.metadata["image_name"] == SWESMITH["image_name"] and task.metadata["source"] == "swe-smith"


def test_r2e_gym_row(tmp_path):
    (task,) = load(write_jsonl(tmp_path / "r.jsonl", [R2E]))
    assert task.instance_id == "proj__" + "c" * 40 and task.base_commit == "d" * 40
    assert "+return a + b" in task.patch and "tests/test_m.py" not in task.patch
    assert task.FAIL_TO_PASS == ("TestM.test_add", "test_other")
    assert task.hidden_tests and task.test_files == ("r2e_tests/test_1.py",)
    assert "+++ b/r2e_tests/test_1.py" in task.test_patch and "+def test_add():" in task.test_patch
    assert "prompt" not in task.metadata and task.expected_status["test_bad"] == "FAILED"


def test_native_round_trip_through_jsonl(tmp_path):
    tasks = load(write_jsonl(tmp_path / "t.jsonl", [SWEBENCH, SWESMITH, R2E]))
    save_jsonl(tasks, tmp_path / "out.jsonl")
    again = load(tmp_path / "out.jsonl")
    assert list(again) == list(tasks)
    assert (tmp_path / "out.jsonl").read_text() == "".join(t.to_json() + "\n" for t in again)


def test_json_and_parquet_and_a_parquet_folder(tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa

    (tmp_path / "t.json").write_text(json.dumps({"instances": [SWEGYM]}))
    assert load(tmp_path / "t.json")[0].instance_id == "owner__proj-13"
    folder = tmp_path / "ds" / "data"
    folder.mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist([SWEGYM]), folder / "train-00000-of-00002.parquet")
    pq.write_table(
        pa.Table.from_pylist([SWEBENCH | {"FAIL_TO_PASS": '["tests/test_m.py::test_x"]'}]),
        folder / "train-00001-of-00002.parquet",
    )
    pq.write_table(pa.Table.from_pylist([SWEGYM | {"instance_id": "other-split"}]), folder / "test-00000.parquet")
    assert [t.instance_id for t in load(folder / "train-00000-of-00002.parquet")] == ["owner__proj-13"]
    tasks = load(tmp_path / "ds", split="train")
    assert [t.instance_id for t in tasks] == ["owner__proj-13", "owner__proj-12"]


def test_bad_rows_name_index_and_field(tmp_path):
    rows = [
        SWEGYM,
        dict(SWEGYM, instance_id="x-1", FAIL_TO_PASS="not json"),
        dict(SWEGYM, instance_id="x-2", FAIL_TO_PASS=[]),
        {"instance_id": "x-3"},
        dict(SWEGYM),
    ]
    path = write_jsonl(tmp_path / "bad.jsonl", rows)
    with path.open("a") as fh:
        fh.write("\n{truncated\n")
    with pytest.raises(LoadError) as info:
        load(path)
    assert info.value.row.index == 1 and info.value.row.field == "FAIL_TO_PASS"
    assert "bad.jsonl: line 2, field 'FAIL_TO_PASS': Task.FAIL_TO_PASS: expected a list of test ids" in str(info.value)
    tasks = load(path, skip_invalid=True)
    assert [t.instance_id for t in tasks] == ["owner__proj-13"]
    assert [(e.index, e.field) for e in tasks.skipped] == [
        (1, "FAIL_TO_PASS"),
        (2, "FAIL_TO_PASS"),
        (3, "FAIL_TO_PASS"),
        (4, "instance_id"),
        (6, ""),
    ]
    assert "expected a unique id" in tasks.skipped[3].message and "first at line 1" in tasks.skipped[3].message
    assert "invalid JSON at column 2" in tasks.skipped[4].message and "line 1" not in tasks.skipped[4].message
    assert tasks.report().startswith("1 tasks loaded, 5 rows skipped")


def test_missing_sources_and_hf_names_give_clear_errors(tmp_path, monkeypatch):
    with pytest.raises(LoadError, match="expected an existing file or folder"):
        load(tmp_path / "nope.jsonl")
    (tmp_path / "t.csv").write_text("a,b\n")
    with pytest.raises(LoadError, match="expected a .jsonl, .json or .parquet file"):
        load(tmp_path / "t.csv")
    (tmp_path / "empty").mkdir()
    with pytest.raises(LoadError, match="found none"):
        load(tmp_path / "empty")
    # without the `datasets` package (None in sys.modules makes its import fail)
    monkeypatch.setitem(sys.modules, "datasets", None)
    with pytest.raises(LoadError, match="needs the `datasets` package.*pip install datasets"):
        load("princeton-nlp/SWE-bench_Verified")
    (tmp_path / "saved").mkdir()
    (tmp_path / "saved" / "dataset_info.json").write_text("{}")
    with pytest.raises(LoadError, match="dataset folder saved by `datasets`"):
        load(tmp_path / "saved")


def test_dataset_folders_saved_by_datasets_load_with_their_splits(tmp_path):
    datasets = pytest.importorskip("datasets")
    other = {**SWEBENCH, "instance_id": SWEBENCH["instance_id"] + "-train"}
    datasets.Dataset.from_list([SWEBENCH]).save_to_disk(str(tmp_path / "one"))
    datasets.DatasetDict(
        {"test": datasets.Dataset.from_list([SWEBENCH]), "train": datasets.Dataset.from_list([other])}
    ).save_to_disk(str(tmp_path / "dict"))
    (task,) = load(tmp_path / "one")
    assert task.instance_id == SWEBENCH["instance_id"]
    assert task.FAIL_TO_PASS == ("tests/test_m.py::test_add",)  # the JSON string decoded
    assert [t.instance_id for t in load(tmp_path / "dict")] == [SWEBENCH["instance_id"]]  # "test" by default
    assert [t.instance_id for t in load(tmp_path / "dict", split="train")] == [other["instance_id"]]
    assert [t.instance_id for t in load(f"{tmp_path / 'dict'}:train")] == [other["instance_id"]]
    with pytest.raises(LoadError, match=r"expected a split 'dev'; found \['test', 'train'\]"):
        load(f"{tmp_path / 'dict'}:dev")


def test_an_unreachable_hub_dataset_is_a_load_error(monkeypatch):
    pytest.importorskip("datasets")
    import datasets.config
    import huggingface_hub.constants

    # offline mode (read at import, so the module constants): the test must not send traffic anywhere, and the
    # error is the one users see without network
    for module, name in [
        (datasets.config, "HF_HUB_OFFLINE"),
        (datasets.config, "HF_DATASETS_OFFLINE"),
        (huggingface_hub.constants, "HF_HUB_OFFLINE"),
    ]:
        monkeypatch.setattr(module, name, True)
    with pytest.raises(LoadError, match="could not load the Hugging Face dataset 'nobody/nothing-here'.*save_to_disk"):
        load("nobody/nothing-here:train")


def test_loaded_tasks_are_tasks(tmp_path):
    assert all(isinstance(t, Task) for t in load(write_jsonl(tmp_path / "t.jsonl", [SWEGYM])))


def test_a_synthesis_output_folder_loads_its_tasks_not_its_rejected_candidates_or_layers(tmp_path):
    """`swebox tasks synth --out DIR` writes tasks.jsonl, rejected.jsonl (another shape) and layers/ (a store
    whose manifests are JSON): loading DIR is loading DIR/tasks.jsonl, not an error about rejected.jsonl's keys."""
    task = Task(instance_id="t-1", repo="o/r", FAIL_TO_PASS=["tests/test_a.py::test_a"])
    save_jsonl([task], tmp_path / "tasks.jsonl")
    (tmp_path / "rejected.jsonl").write_text(json.dumps({"candidate": "x", "reason": "gold did not resolve"}) + "\n")
    (tmp_path / "layers" / "manifests").mkdir(parents=True)
    (tmp_path / "layers" / "manifests" / "env-abc.json").write_text(json.dumps({"key": "env-abc", "kind": "env"}))
    assert [t.instance_id for t in load(tmp_path)] == ["t-1"]
    (tmp_path / "tasks.jsonl").rename(tmp_path / "more.jsonl")  # a plain folder of task files: still no manifests
    (tmp_path / "rejected.jsonl").unlink()
    assert [t.instance_id for t in load(tmp_path)] == ["t-1"]


def test_a_swebox_parquet_with_json_string_lists_loads_and_a_bad_string_is_named(tmp_path):
    """A parquet of swebox rows whose list columns are JSON strings, as SWE-bench stores them: decoded, not told
    to "write it as a JSON list"; a string that is no JSON list still names the field and what it found."""
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa

    row = Task(
        instance_id="t-1",
        repo="o/r",
        FAIL_TO_PASS=["tests/test_a.py::test_a"],
        PASS_TO_PASS=["tests/test_a.py::test_b"],
    ).to_dict()
    row = {
        k: (json.dumps(list(v)) if isinstance(v, (list, tuple)) else v)
        for k, v in row.items()
        if k not in ("metadata", "env") and not isinstance(v, dict)
    }
    pq.write_table(pa.Table.from_pylist([row]), tmp_path / "tasks.parquet")
    [task] = load(tmp_path / "tasks.parquet")
    assert task.FAIL_TO_PASS == ("tests/test_a.py::test_a",) and task.PASS_TO_PASS == ("tests/test_a.py::test_b",)
    assert detect(row) == "swebox"
    pq.write_table(
        pa.Table.from_pylist([{**row, "FAIL_TO_PASS": '["tests/test_a.py::test_a"'}]), tmp_path / "bad.parquet"
    )
    with pytest.raises(
        LoadError,
        match=r"Task.FAIL_TO_PASS: expected a list of strings or a JSON string of one; "
        r"found a string that is not valid JSON",
    ):
        load(tmp_path / "bad.parquet")
