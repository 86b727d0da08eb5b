"""Task schema: exact JSON-lines round trip and validation messages that say what to fix."""

from __future__ import annotations

import json

import pytest
from swebox.envs.cache.spec import EnvSpec
from swebox.envs.tasks import DEFAULT_TEST_CMD, Task, TaskError
from swebox.envs.tasks.schema import SWEBENCH_FIELDS


def make(**over):
    fields = dict(
        instance_id="proj__proj-1",
        repo="owner/proj",
        base_commit="abc1234",
        patch="diff --git a/p.py b/p.py\n--- a/p.py\n+++ b/p.py\n@@ -1 +1 @@\n-a\n+b\n",
        FAIL_TO_PASS=["tests/test_p.py::test_a"],
        PASS_TO_PASS=["tests/test_p.py::test_b"],
        env=EnvSpec(source="pypi:toolz==1.0.0"),
    )
    fields.update(over)
    return Task(**fields)


def test_round_trip_is_exact():
    task = make(
        problem_statement="naïve ünïcode\nand lines",
        metadata={"k": [1, {"x": None}]},
        hidden_tests=True,
        test_files=["tests/test_p.py"],
        setup_commands=["true"],
    )
    line = task.to_json()
    back = Task.from_json(line)
    assert back == task
    assert back.to_json() == line
    assert isinstance(back.env, EnvSpec) and back.env_key == task.env.key()
    assert "\n" not in line and "naïve" in line


def test_swebench_keys_come_first_and_env_is_a_dict():
    data = make().to_dict()
    assert tuple(data)[: len(SWEBENCH_FIELDS)] == SWEBENCH_FIELDS
    assert data["env"] == EnvSpec(source="pypi:toolz==1.0.0").to_dict()
    assert data["test_cmd"] == DEFAULT_TEST_CMD


def test_defaults_and_derived_fields():
    task = make(env=None, test_files=["tests/helpers_data.py"], test_cmd="/venv/bin/python -m pytest -p no:cov -x")
    assert task.env_key == ""
    assert task.python == "/venv/bin/python" and task.pytest_options == ["-p", "no:cov", "-x"]
    assert task.all_test_files() == ("tests/helpers_data.py", "tests/test_p.py")


@pytest.mark.parametrize(
    "over, field, words",
    [
        (dict(FAIL_TO_PASS=[]), "FAIL_TO_PASS", "at least one test id"),
        (dict(FAIL_TO_PASS="tests/test_p.py::test_a"), "FAIL_TO_PASS", "a list of strings"),
        (dict(FAIL_TO_PASS=["a", ""]), "FAIL_TO_PASS", "non-empty strings"),
        (dict(FAIL_TO_PASS=["a", "a"]), "FAIL_TO_PASS", "each entry once"),
        (dict(PASS_TO_PASS=["tests/test_p.py::test_a"]), "PASS_TO_PASS", "no id also in FAIL_TO_PASS"),
        (dict(instance_id="has space"), "instance_id", "without whitespace"),
        (dict(instance_id=""), "instance_id", "non-empty id"),
        (dict(test_cmd="pytest -x"), "test_cmd", "'<absolute python> -m pytest [options]'"),
        (dict(test_files=["/abs/test.py"]), "test_files", "repository-relative"),
        (dict(hidden_tests="yes"), "hidden_tests", "true or false"),
        (dict(metadata={"x": object()}), "metadata", "JSON-serialisable"),
        (dict(env={"source": "nowhere"}), "env", None),
        (dict(patch=3), "patch", "a string"),
    ],
)
def test_validation_messages(over, field, words):
    with pytest.raises(ValueError) as info:
        make(**over)
    message = str(info.value)
    if words is None:  # the EnvSpec's own message
        assert "EnvSpec.source" in message
        return
    assert message.startswith(f"Task.{field}: expected ") and words in message
    assert "; found " in message


def test_from_dict_rejects_unknown_keys_and_non_objects():
    data = make().to_dict() | {"surprise": 1}
    with pytest.raises(TaskError, match=r"unknown keys \['surprise'\]"):
        Task.from_dict(data)
    with pytest.raises(TaskError, match=r"expected a dict \(a JSON object\) of its fields .*; found list.*per line"):
        Task.from_dict([1])
    with pytest.raises(TaskError, match="invalid JSON"):
        Task.from_json("{nope")
    with pytest.raises(TaskError, match="missing key 'instance_id'"):
        Task.from_json(json.dumps({"repo": "x"}))
