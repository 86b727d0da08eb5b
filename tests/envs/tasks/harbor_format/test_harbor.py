"""Harbor task folders in, without sandboxes: the reward file rules, the Dockerfile subset, the load errors.

The end-to-end path (layers built, oracle 1, nothing 0, broken reward file 0) is tests/envs/tasks/
test_harbor_e2e.py."""

from __future__ import annotations

import json

import pytest
from swebox.envs.tasks import LoadError, Task, load
from swebox.envs.tasks.harbor_format.dockerfile import DockerfileError, parse
from swebox.envs.tasks.harbor_format.folders import unpack
from swebox.envs.tasks.harbor_format.verify import parse_reward

from tests.harbor_fixture import INSTRUCTION, SOLVE_SH, write_task


@pytest.mark.parametrize(
    ("json_bytes", "txt_bytes", "reward", "problem"),
    [
        (None, b"1\n", 1.0, ""),
        (None, b"0.25", 0.25, ""),
        (b'{"reward": 1.0, "accuracy": 0.5}', b"0", 1.0, ""),  # reward.json wins over reward.txt, as in Harbor
        (b'{"accuracy": 0.5}', None, 0.5, ""),
        (None, None, 0.0, "no reward file"),
        (None, b"", 0.0, "found an empty file"),
        (None, b"not-a-number", 0.0, "expected a number; found b'not-a-number'"),
        (None, b"nan", 0.0, "expected a finite number"),
        (b"{broken", None, 0.0, "invalid JSON"),
        (b"1.0", None, 0.0, "expected a JSON object"),
        (b'{"reward": "1"}', None, 0.0, "expected finite numbers"),
        (b'{"a": 1, "b": 0}', None, 0.0, "expected a 'reward' key"),
    ],
)
def test_reward_files_are_read_as_harbor_reads_them(json_bytes, txt_bytes, reward, problem):
    got, why = parse_reward(json_bytes, txt_bytes)
    assert got == reward
    assert (problem in why) if problem else why == ""


def test_dockerfile_subset_parses_and_ignores_runtime_only_lines():
    recipe = parse(
        "FROM img:1\n# c\nENV A=1 B='two words'\nENV LEGACY some value\nWORKDIR /app\n"
        "COPY a.py b/ /app/\nRUN echo one \\\n  two\nRUN [\"echo\", \"x y\"]\nUSER root\n"
        "EXPOSE 80\nCMD [\"bash\"]\n"
    )
    assert recipe.image == "img:1"
    assert [(s.op, s.line, s.args) for s in recipe.steps] == [
        ("env", 3, ["A", "1", "B", "two words"]),
        ("env", 4, ["LEGACY", "some value"]),
        ("workdir", 5, ["/app"]),
        ("copy", 6, ["a.py", "b/", "/app/"]),
        ("run", 7, ["echo one  two"]),
        ("run", 9, ["echo 'x y'"]),
    ]


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        ("FROM a\nADD https://x/y.tgz /\n", 2, "cannot run ADD rootless"),
        ("FROM a\nRUN x\nUSER app\n", 3, "USER root"),
        ("FROM a AS b\nFROM c\n", 2, "a single FROM"),
        ("FROM a\nCOPY --from=b /x /y\n", 2, "no flags"),
        ("FROM a\nRUN --mount=type=cache,target=/x true\n", 2, "without flags"),
        ("RUN true\n", 1, "FROM before any other instruction"),
    ],
)
def test_unsupported_dockerfile_lines_are_refused_naming_the_line(text, line, words):
    with pytest.raises(DockerfileError) as err:
        parse(text, "env/Dockerfile")
    message = str(err.value)
    assert message.startswith(f"env/Dockerfile:{line}: expected ") and words in message and "\n" not in message


def test_a_harbor_folder_loads_as_tasks_with_hidden_tests(tmp_path):
    write_task(tmp_path, "swebox/py39:latest", name="one")
    write_task(tmp_path, "swebox/py39:latest", name="two", reward="json")
    tasks = load(tmp_path)
    assert [t.instance_id for t in tasks] == ["one", "two"]
    task = tasks[0]
    assert task.grader == "harbor" and task.problem_statement == INSTRUCTION and task.FAIL_TO_PASS == ()
    assert task.metadata["image"] == "swebox/py39:latest" and task.test_cmd == "/tests/test.sh"
    harbor = task.metadata["harbor"]
    assert set(unpack(harbor["tests"])) == {"test.sh"} and harbor["verifier_timeout_s"] == 120.0
    assert unpack(harbor["solution"])["solve.sh"] == (SOLVE_SH.encode(), 0o755)
    assert [s[0] for s in harbor["recipe"]["steps"]] == ["env", "workdir", "copy", "run"]
    assert Task.from_json(task.to_json()) == task  # a Harbor task is an ordinary row: it round-trips
    assert [t.instance_id for t in load(tmp_path / "one")] == ["one"]  # one task folder loads too
    assert json.loads(task.to_json())["grader"] == "harbor"


def test_bad_harbor_folders_fail_with_one_line_each(tmp_path):
    def one_line_error(path, *words):
        with pytest.raises(LoadError) as err:
            load(path)
        message = str(err.value)
        assert "\n" not in message and all(w in message for w in words), message

    no_tests = write_task(tmp_path / "a", "img")
    (no_tests / "tests" / "test.sh").unlink()
    one_line_error(no_tests, "tests/test.sh: expected the verifier script", "found no such file", "Add tests/test.sh")
    bad_toml = write_task(tmp_path / "b", "img")
    (bad_toml / "task.toml").write_text("[verifier\ntimeout_sec = 1\n")
    one_line_error(bad_toml, "task.toml: expected valid TOML", "found a parse error", "Fix the TOML syntax")
    bad_timeout = write_task(tmp_path / "c", "img")
    (bad_timeout / "task.toml").write_text("[verifier]\ntimeout_sec = 'soon'\n")
    one_line_error(bad_timeout, "timeout_sec: expected a positive number of seconds", "'soon'")
    bad_line = write_task(tmp_path / "d", "img")
    with (bad_line / "environment" / "Dockerfile").open("a") as fh:
        fh.write("ADD https://example.com/x.tgz /opt/\n")
    one_line_error(
        bad_line, "Dockerfile:10: expected FROM, RUN, WORKDIR, ENV, COPY or USER root", "cannot run ADD rootless"
    )
    no_env = write_task(tmp_path / "e", "img")
    (no_env / "environment" / "Dockerfile").unlink()
    one_line_error(no_env, "expected environment/Dockerfile or [environment].docker_image")
    # with skip_invalid, the bad task is listed and the good one loads
    write_task(tmp_path / "f", "img", name="good")
    bad = write_task(tmp_path / "f", "img", name="bad")
    (bad / "tests" / "test.sh").unlink()
    tasks = load(tmp_path / "f", skip_invalid=True)
    assert [t.instance_id for t in tasks] == ["good"] and "tests/test.sh" in tasks.report()


def test_the_provider_without_harbor_says_what_to_install():
    import importlib.util

    if importlib.util.find_spec("harbor") is not None:
        pytest.skip(
            "harbor is installed in this interpreter "
            "(tests/envs/frameworks/test_harbor_env_py312.py covers the provider)"
        )
    with pytest.raises(ImportError) as err:
        import swebox.envs.frameworks.harbor_env  # noqa: F401
    assert str(err.value).startswith(
        "swebox.envs.frameworks.harbor_env: expected the harbor package (harbor 0.25, Python >= 3.12); found none"
    )
    assert "pip install 'harbor==0.25.0'" in str(err.value)


def test_harbor_cli_commands_fail_in_one_line(tmp_path, capsys):
    from swebox.scripts.cli import build_parser

    from tests.calc import calc_task

    def run(*argv):
        args = build_parser().parse_args(list(argv))
        return args.func(args)

    write_task(tmp_path / "tasks", "swebox/not-pulled:1", name="one")
    store = tmp_path / "store"
    assert (
        run(
            "tasks", "harbor-import", str(tmp_path / "tasks"), "--store", str(store), "--out", str(tmp_path / "t.jsonl")
        )
        == 2
    )
    err = capsys.readouterr().err.strip()
    assert err == (
        f"error: FROM swebox/not-pulled:1: expected an image in the layer store {store}; found none. "
        f"Pull it with: swebox cache pull swebox/not-pulled:1 --store {store}"
    ), err
    rows = tmp_path / "rows.jsonl"
    django = calc_task(
        instance_id="django-row",
        env=None,
        grader="log",
        log_parser="django/django",
        test_cmd="./tests/runtests.py",
        metadata={"image": "img"},
    )
    rows.write_text(
        calc_task(instance_id="img-row", env=None, metadata={"image": "img"}).to_json() + "\n" + django.to_json() + "\n"
    )
    assert run("tasks", "export", "--format", "harbor", "--tasks", str(rows), "--out", str(tmp_path / "out")) == 1
    out, err = capsys.readouterr()
    assert out.strip() == f"1 Harbor task folders written to {tmp_path / 'out'}"
    assert err.strip() == (
        "skipped: task django-row: expected a pytest-graded row (junit, or a pytest-family "
        "SWE-bench log parser); found log parser 'django/django'. Only pytest -rA verdicts "
        "are exported to Harbor."
    )
    assert sorted(p.name for p in (tmp_path / "out" / "img-row").rglob("*") if p.is_file()) == [
        "Dockerfile",
        "fix.patch",
        "ids.json",
        "instruction.md",
        "score.py",
        "solve.sh",
        "task.toml",
        "test.sh",
    ]
