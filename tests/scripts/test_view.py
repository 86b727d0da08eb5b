"""``swebox view`` in a real headless browser (Debian's chromium via chromium-driver, driven by Selenium) against
the viewer serving a real tiny training run (tests/trainers/tiny_run.py: real sandboxes, real grading) and a real
``swebox eval --out`` output; then damaged, growing and empty runs.

``SWEBOX_UPDATE_SCREENSHOTS=1`` writes the pages' screenshots to docs/img/ (shown in docs/training.md).
"""

from __future__ import annotations

import gzip
import io
import os
import shutil
import threading
from pathlib import Path

import pytest

from tests.calc import layer_dirs

CHROMIUM, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")
pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        not (CHROMIUM and DRIVER),
        reason="needs Debian's chromium and chromium-driver "
        "(apt-get install chromium chromium-driver; make setup installs them)",
    ),
]
DOCS_IMG = Path(__file__).parents[2] / "docs" / "img"


@pytest.fixture(scope="module")
def tiny_run(calc_layer, tmp_path_factory):
    from tests.trainers.tiny_run import make_trainer

    root = tmp_path_factory.mktemp("view")
    trainer = make_trainer(root / "run", calc_layer, "total_steps=2")
    trainer.train()
    return root / "run"


@pytest.fixture(scope="module")
def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1280,1500",
        "--no-proxy-server",
        "--disable-extensions",
    ):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(DRIVER), options=options)
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


class Served:
    """``swebox view``'s server on a free loopback port, in a thread."""

    def __init__(self, path: Path, tasks_file: Path | None = None, calibration: Path | None = None) -> None:
        from swebox.scripts.viewer.app import make_server

        self.server = make_server(path, "127.0.0.1", 0, tasks_file, calibration)
        self.url = f"http://127.0.0.1:{self.server.port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def __enter__(self) -> Served:
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(10)


def shot(driver, tmp_path: Path, name: str) -> None:
    """A full-page screenshot that is not blank (many colours, not one); kept in docs/img when asked."""
    from PIL import Image

    driver.execute_script("window.scrollTo(0, 0)")
    height = driver.execute_script("return document.body.scrollHeight")
    driver.set_window_size(1280, min(max(900, height + 40), 3000))
    png = driver.get_screenshot_as_png()
    image = Image.open(io.BytesIO(png)).convert("RGB")
    colours = image.getcolors(maxcolors=1 << 20) or []
    assert image.size[0] >= 1000 and len(colours) > 30, f"{name}: the screenshot looks blank"
    folder = DOCS_IMG if os.environ.get("SWEBOX_UPDATE_SCREENSHOTS") else tmp_path
    folder.mkdir(parents=True, exist_ok=True)
    image.save(folder / f"view-{name}.png", optimize=True)
    driver.set_window_size(1280, 1500)


def text(driver) -> str:
    from selenium.webdriver.common.by import By

    return driver.find_element(By.TAG_NAME, "body").text


def test_run_step_rollout_turn_and_task_pages_of_a_real_run(tiny_run, browser, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait
    from swebox.trainers.run.trajectories import read_jsonl, step_file

    records = read_jsonl(step_file(tiny_run, 1)).records
    gold = next(r for r in records if r["task_id"] == "calc-add" and r["num_turns"] == 3)
    wrong = next(r for r in records if "return a * b" in r["diff"])
    with Served(tiny_run) as served:
        browser.get(served.url + "/")
        page = text(browser)
        assert "run" in browser.title and "Steps" in page and "calc-add" in page and "calc-div" in page
        assert len(browser.find_elements(By.CSS_SELECTOR, "svg.chart polyline")) == 2
        assert len(browser.find_elements(By.CSS_SELECTOR, "a.step-link")) == 2
        shot(browser, tmp_path, "run")
        browser.find_elements(By.CSS_SELECTOR, "a.step-link")[0].click()
        assert browser.current_url.endswith("/step/1")
        page = text(browser)
        assert "step 1" in page and "calc-add" in page and "4 rollouts" in page and "format error" in page
        assert {e.text for e in browser.find_elements(By.CSS_SELECTOR, ".diff-tag")} >= {"A", "B", "-"}
        shot(browser, tmp_path, "step")
        browser.find_element(By.CSS_SELECTOR, f'a.rollout-link[href="/rollout/1/{gold["index"]}"]').click()
        page = text(browser)
        assert "calc-add" in page and "resolved · reward 1.000" in page
        assert "cat /testbed/calc/ops.py" in page and "exit code 0" in page and "def add(a, b)" in page
        assert "+    return a + b" in page and "tests/test_ops.py::test_add" in page
        browser.find_elements(By.CSS_SELECTOR, "a.turn-link")[1].click()
        assert browser.current_url.endswith("#turn-2")
        assert "action: bash" in browser.find_element(By.ID, "turn-2").text
        shot(browser, tmp_path, "rollout")
        browser.get(f"{served.url}/rollout/1/{wrong['index']}")
        page = text(browser)
        assert "not resolved" in page and "return a * b" in page
        failing = browser.find_element(By.XPATH, "//table[@class='tests']//tr[td[contains(., 'test_add')]]").text
        assert "failed" in failing and "F2P" in failing
        browser.find_element(By.CSS_SELECTOR, "h1 a").click()  # the task page
        page = text(browser)
        assert browser.current_url.endswith("/task/calc-add") and "add(2, 3) returns -1" in page
        assert "Rollouts of this task (8)" in page and "+    return a + b" in page  # the gold patch
        shot(browser, tmp_path, "task")
        # filters and search read only the index
        browser.get(served.url + "/?filter=resolved")
        rows = browser.find_elements(By.CSS_SELECTOR, "table.rows tbody tr")
        assert rows and all(" yes " in f" {r.text} " for r in rows)
        browser.get(served.url + "/?filter=timeouts")
        assert "2 rollouts" in text(browser)
        box = browser.find_element(By.CSS_SELECTOR, "input[name=q]")
        box.send_keys("calc-div")
        box.submit()  # a script's form.submit(): unlike a click, WebDriver does not wait for the next page
        WebDriverWait(browser, 30).until(
            lambda b: "q=calc-div" in b.current_url and b.execute_script("return document.readyState") == "complete"
        )
        rows = browser.find_elements(By.CSS_SELECTOR, "table.rows tbody tr")
        assert len(rows) == 8 and all("calc-div" in r.text for r in rows)  # 4 per step
        assert browser.find_elements(By.CSS_SELECTOR, "link[href^='http'], script[src]") == []  # nothing external


def test_an_eval_output(calc_layer, tmp_path, browser, capsys):
    from selenium.webdriver.common.by import By
    from swebox.envs.tasks import save_jsonl
    from swebox.scripts.cli import build_parser

    from tests.trainers.tiny_run import calc_tasks

    save_jsonl(calc_tasks(), tmp_path / "tasks.jsonl")
    out = tmp_path / "gold.jsonl"
    args = build_parser().parse_args(
        [
            "eval",
            "--tasks",
            str(tmp_path / "tasks.jsonl"),
            "--policy",
            "gold",
            "--layers",
            str(layer_dirs(tmp_path, calc_layer)),
            "--out",
            str(out),
        ]
    )
    assert args.func(args) == 0
    capsys.readouterr()
    with Served(out, tmp_path / "tasks.jsonl") as served:
        browser.get(served.url + "/")
        assert "eval" in text(browser) and "calc-div" in text(browser)
        browser.find_element(By.CSS_SELECTOR, "a.step-link").click()  # the eval's one pseudo-step
        assert "calc-add" in text(browser) and "1 resolved" in text(browser)
        browser.find_element(By.CSS_SELECTOR, 'a.rollout-link[href="/rollout/0/1"]').click()
        page = text(browser)
        assert "calc-div" in page and "resolved · reward 1.000" in page and "tests/test_ops.py::test_div" in page
        browser.find_element(By.CSS_SELECTOR, "h1 a").click()  # its task page: the gold patch from --tasks
        assert "div(7, 2) returns 3" in text(browser) and "+    return a / b" in text(browser)


def test_damaged_growing_and_empty_runs(tiny_run, tmp_path, browser):
    from selenium.webdriver.common.by import By
    from swebox.trainers.run.trajectories import step_file

    run = tmp_path / "growing"
    run.mkdir()
    with Served(run) as served:
        browser.get(served.url + "/")
        assert "No steps yet" in text(browser) and "No rollouts yet" in text(browser)
        # the trainer writes step 1 (metrics line, step file, index lines): a reload shows it
        (run / "trajectories").mkdir()
        shutil.copy(step_file(tiny_run, 1), step_file(run, 1))
        index = (tiny_run / "trajectories" / "index.jsonl").read_text().splitlines(keepends=True)
        (run / "trajectories" / "index.jsonl").write_text("".join(index[:8]))
        (run / "metrics.jsonl").write_text((tiny_run / "metrics.jsonl").read_text().splitlines()[0] + "\n")
        browser.refresh()
        assert len(browser.find_elements(By.CSS_SELECTOR, "a.step-link")) == 1
        # step 2 arrives, but its file is cut short and the index got a torn line
        data = step_file(tiny_run, 2).read_bytes()
        step_file(run, 2).write_bytes(data[: len(data) * 2 // 3])
        with open(run / "trajectories" / "index.jsonl", "a") as f:
            f.write("".join(index[8:]) + '{"step": 3, "ind\n')
        browser.refresh()
        page = text(browser)
        assert len(browser.find_elements(By.CSS_SELECTOR, "a.step-link")) == 2
        assert "Could not read everything" in page and "index.jsonl: line 17: not JSON" in page
        browser.get(served.url + "/step/2")
        page = text(browser)
        assert "step_000002.jsonl.gz: the file is truncated or corrupt" in page
        assert "calc-" in page  # the rollouts before the damage are shown
        with gzip.open(step_file(run, 2), "rt", errors="replace") as f, pytest.raises(EOFError):
            f.read()


def test_a_beam_search_tree(calc_layer, tmp_path, browser, capsys, monkeypatch):
    """A real `swebox eval --search beam --out` (a scripted policy: fix, look, submit) shown on the rollout page:
    every line with its parent and fork turn, its actions and observations, the rule's values, kept/pruned,
    the verdicts, the chosen path, and the oracle rule named as the oracle."""
    import json

    from selenium.webdriver.common.by import By
    from swebox.envs.tasks import save_jsonl
    from swebox.scripts.cli import main

    from tests.calc import GOLD, apply_patch, calc_task
    from tests.envs.test_search import WRONG_MUL, FixLookSubmit

    save_jsonl([calc_task()], tmp_path / "tasks.jsonl")
    # the command's text policy (here: --policy gold's) is replaced by the scripted one; the rest is swebox eval's
    monkeypatch.setattr(
        "swebox.scripts.eval_play.text_policy",
        lambda args, cfg: lambda task: FixLookSubmit([WRONG_MUL, apply_patch(GOLD)]),
    )
    out = tmp_path / "beam.jsonl"
    assert (
        main(
            [
                "eval",
                "--tasks",
                str(tmp_path / "tasks.jsonl"),
                "--policy",
                "gold",
                "--layers",
                str(layer_dirs(tmp_path, calc_layer)),
                "env.max_turns=5",
                "--search",
                "beam",
                "--width",
                "2",
                "--depth",
                "2",
                "--select",
                "oracle",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    assert "selected by the ORACLE (hidden tests; research only): resolved 1/1" in capsys.readouterr().out
    search = json.loads(out.read_text())["search"]
    # the oracle keeps the gold line (1) first: it forks line 2 at turn 1, line 0 forks line 3; 1 and 2 live on
    assert [(n["parent"], n["forked_at"], n["status"]) for n in search["tree"]] == [
        (None, 0, "pruned"),
        (0, 0, "ended"),
        (1, 1, "ended"),
        (0, 1, "pruned"),
    ]
    with Served(out) as served:
        browser.get(served.url + "/rollout/0/0")
        page = text(browser)
        assert "resolved · reward 1.000 · 3 turns" in page and "+    return a + b" in page
        assert "Search tree 4 lines · 2 graded (2 resolved) · 2 pruned · 3 forks" in page
        rule = browser.find_element(By.ID, "search-rule")
        assert "selected by the ORACLE (hidden tests; research only)" in rule.text and "oracle" in rule.get_attribute(
            "class"
        )
        lines = {n: browser.find_element(By.ID, f"line-{n}") for n in range(4)}
        # nested as forked: 1 and 3 under 0, 2 under 1
        assert lines[1].find_element(By.XPATH, "../..").get_attribute("id") == "line-0"
        assert lines[2].find_element(By.XPATH, "../..").get_attribute("id") == "line-1"
        assert lines[3].find_element(By.XPATH, "../..").get_attribute("id") == "line-0"
        assert {n for n, e in lines.items() if "chosen" in e.get_attribute("class").split()} == {0, 1}
        assert "picked" in lines[1].get_attribute("class").split()
        head = lines[1].find_element(By.CSS_SELECTOR, ".node-head").text
        assert "forked from #0 at turn 0" in head and "picked" in head and "resolved · reward 1.000" in head
        assert "level 1 (turn 1): value 1.000 · kept" in lines[1].text
        assert "level 2 (turn 2): value 1.000 · kept" in lines[1].text
        assert "pruned (closed ungraded)" in lines[3].find_element(By.CSS_SELECTOR, ".node-head").text
        assert "level 2 (turn 2): value 0.000 · pruned" in lines[3].text
        assert "forked from #1 at turn 1" in lines[2].find_element(By.CSS_SELECTOR, ".node-head").text
        # a line's own turns: the action on one line, the observation unfolded on a click
        first = lines[0].find_element(By.CSS_SELECTOR, ":scope > ol.node-turns > li")
        assert "bash: cd /testbed && sed -i '2s/a - b/a * b/' calc/ops.py" in first.text and "exit 0" in first.text
        look = lines[2].find_element(By.CSS_SELECTOR, ":scope > ol.node-turns > li")
        look.find_element(By.TAG_NAME, "summary").click()
        assert "2:    return a + b" in look.find_element(By.CSS_SELECTOR, "pre.node-observation").text
        shot(browser, tmp_path, "search")


def test_an_audit_flagged_rollout_shows_its_rules_per_rollout_and_per_turn(calc_layer, tmp_path, browser):
    """A real episode that reads git history, recorded as `swebox eval --out` records it, in the viewer."""
    import json

    from swebox.envs.episodes.episode import EpisodeConfig, SWEEpisode
    from swebox.envs.episodes.episode_state import StartState
    from swebox.scripts.train_cli import play_text_episode

    from tests.calc import GOLD, SUBMIT, apply_patch, bash, calc_task

    replies = iter([bash("cd /testbed && git log --all --oneline"), apply_patch(GOLD), SUBMIT])
    episode = SWEEpisode(calc_task(), StartState([calc_layer], [calc_layer]), EpisodeConfig(audit="zero"))
    try:
        record = play_text_episode(episode, lambda messages: next(replies), 5)
    finally:
        episode.close()
    assert record["audit"]["rules"] == ["git_history"] and record["reward"] == 0.0
    record.update(instance_id="calc-add", total_s=1.0)
    out = tmp_path / "audit.jsonl"
    out.write_text(json.dumps(record) + "\n")
    with Served(out) as served:
        browser.get(served.url + "/rollout/0/0")
        page = text(browser)
        assert "exploit audit: git_history (zeroed)" in page and "audit: git_history" in page
        assert "grader junit (swebox" in page
        shot(browser, tmp_path, "audit")


def test_calibration_and_cost_per_rollout(calc_layer, tmp_path, browser, capsys):
    """A real calibration (one task flaky, one unsolvable) and a real `swebox eval --calibration` output: the
    run page sums the calibration up, a task page shows its own, a rollout page its cost; hostile text in a
    calibration file and a record's cost is shown as text, never as markup."""
    import json

    from selenium.webdriver.common.by import By
    from swebox.envs.tasks import save_jsonl
    from swebox.envs.tasks.calibrate import calibrate, write_calibration
    from swebox.envs.tasks.validate import layers_from_dirs
    from swebox.scripts.cli import build_parser

    from tests.calc import FLAKY_ID, calc_task, flaky_layer, flaky_task

    dirs = layer_dirs(tmp_path, calc_layer)
    state = flaky_layer(dirs)
    wrong = calc_task(instance_id="calc-wrong", patch=calc_task().patch.replace("a + b", "a * b"))
    tasks = [calc_task(), flaky_task(), wrong]
    save_jsonl(tasks, tmp_path / "tasks.jsonl")

    def flip(task_id, kind, i, report):  # the flaky test passes in one gold run and fails in the other
        if task_id == "calc-flaky" and kind == "gold":
            state.write_text("fail\n" if state.read_text().strip() == "pass" else "pass\n")

    cal = tmp_path / "cal.json"
    write_calibration(cal, calibrate(tasks, layers_from_dirs(dirs), runs=2, on_run=flip))
    out = tmp_path / "gold.jsonl"
    args = build_parser().parse_args(
        [
            "eval",
            "--tasks",
            str(tmp_path / "tasks.jsonl"),
            "--policy",
            "gold",
            "--layers",
            str(dirs),
            "--calibration",
            str(cal),
            "--out",
            str(out),
        ]
    )
    assert args.func(args) == 0
    printed = capsys.readouterr().out
    assert f"calibration {cal}: kept 2 of 3 tasks; left out 1: calc-wrong (gold resolved 0/2)" in printed
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["instance_id"] for r in records] == ["calc-add", "calc-flaky"] and all(r["resolved"] for r in records)
    assert all(r["cost"]["cpu_s"] > 0 and r["cost"]["grade_cpu_s"] > 0 for r in records)
    doc = json.loads(cal.read_text())  # a policy's solve rate (swebox tasks calibrate --policy) on one task
    doc["tasks"][1]["policy"] = {"name": "gold", "resolved": 1, "runs": 2, "errors": 0}
    cal.write_text(json.dumps(doc))
    with Served(out, tmp_path / "tasks.jsonl", cal) as served:
        browser.get(served.url + "/")
        assert "calibration " in text(browser) and "2 of 3 tasks usable, 1 not; 1 with flaky tests" in text(browser)
        browser.get(served.url + "/rollout/0/1")
        cost = browser.find_element(By.ID, "cost").text
        assert cost.startswith("cost: ") and "CPU" in cost and "peak" in cost and "grading" in cost, cost
        shot(browser, tmp_path, "cost")
        browser.get(served.url + "/task/calc-flaky")
        page = text(browser)
        assert "usable · gold resolved 1/2 (2/2 with the flaky tests quarantined) · empty diff resolved 0/2" in page
        assert "empty diff resolved 0/2 · policy gold resolved 1/2 · " in page
        assert FLAKY_ID in page and "gold: passed,failed" in page
        shot(browser, tmp_path, "calibration")
        browser.get(served.url + "/task/calc-wrong")  # left out: no rollout, its calibration says why
        assert "left out: gold resolved 0/2" in text(browser)

    hostile = json.loads(cal.read_text())
    hostile["tasks"][0]["flaky_tests"] = {"<img src=x id=injected>": "<script>document.title='owned'</script>"}
    hostile["tasks"][0]["first_error"] = "<b id=bold>not bold</b>"
    cal.write_text(json.dumps(hostile))
    records[0]["cost"]["source"] = "<i id=italic>cgroup</i>"
    out.write_text("".join(json.dumps(r) + "\n" for r in records))
    with Served(out, tmp_path / "tasks.jsonl", cal) as served:
        browser.get(served.url + "/task/calc-add")
        assert "<img src=x id=injected>" in text(browser) and "<b id=bold>not bold</b>" in text(browser)
        browser.get(served.url + "/rollout/0/0")
        assert "from <i id=italic>cgroup</i>" in text(browser)
        assert browser.find_elements(By.CSS_SELECTOR, "#injected, #bold, #italic, main script") == []
        assert browser.title != "owned"
