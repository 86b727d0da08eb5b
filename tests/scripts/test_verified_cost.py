"""scripts/verified_cost.py: the cold start of a row's whole stack from an empty node cache, in a real sandbox
over a real layer store, and the storage projection's arithmetic."""

from __future__ import annotations

import io
from pathlib import Path

from swebox.envs.cache import LayerStore
from swebox.envs.tasks.loaders import save_jsonl
from swebox.envs.tasks.schema import EnvSpec
from swebox.scripts import verified_cost
from swebox.scripts.verified_cost import RowCost, projection

from tests.calc import CALC_ENV, calc_task


def test_cold_start_and_storage_of_a_stored_row(tmp_path, calc_layer):
    store = LayerStore(tmp_path / "store")
    with store.lock(CALC_ENV.key()):
        store.publish(CALC_ENV.key(), calc_layer, kind="env")
    other = calc_task(instance_id="calc-other", env=EnvSpec(source="/fixture/other", commit="f" * 16))
    save_jsonl([calc_task(), other], tmp_path / "rows.jsonl")

    costs, missing = verified_cost.measure(str(tmp_path / "rows.jsonl"), str(tmp_path / "store"), reps=2)
    assert missing == ["calc-other"]  # listed, not dropped
    [cost] = costs
    assert cost.instance_id == "calc-add" and list(cost.layers) == ["env"]
    assert cost.layers["env"] == (CALC_ENV.key(), store.get(CALC_ENV.key()).size)
    assert len(cost.cold_ms) == 2 and all(ms > 0 for ms in cost.cold_ms)
    assert "swebox-cold-" not in Path("/proc/self/mounts").read_text()  # every node cache unmounted

    out = io.StringIO()
    verified_cost.report(costs, missing, out=out)
    text = out.getvalue()
    assert "| calc-add | 1 |" in text and "not measured (a layer missing from the store): calc-other" in text
    assert "cold start, median over the rows:" in text and "SWE-MiniSandbox 23.62 s" in text
    assert f"sample store: 1 layers, {store.get(CALC_ENV.key()).size / 1e6:.0f} MB for 1 rows" in text


def test_nothing_measurable_exits_1(tmp_path, capsys):
    from swebox.scripts.cli import main

    save_jsonl([calc_task()], tmp_path / "rows.jsonl")
    LayerStore(tmp_path / "store")
    assert main(["bench", "verified-cost", str(tmp_path / "rows.jsonl"), str(tmp_path / "store"), "--reps", "1"]) == 1
    assert "not measured (a layer missing from the store): calc-add" in capsys.readouterr().out


def test_projection_prices_the_split_at_the_sample_means():
    python = ("py39", 50)
    rows = [
        RowCost("a", {"python:python3.9": python, "env": ("e1", 100), "task": ("t1", 10)}, [1.0]),
        RowCost("b", {"python:python3.9": python, "env": ("e1", 100), "task": ("t2", 30)}, [1.0]),
        RowCost("c", {"python:python3.9": python, "env": ("e2", 300), "task": ("t3", 20)}, [1.0]),
    ]
    # env layers counted once per key (mean of 100 and 300), task layers each, the interpreter once
    assert projection(rows, env_keys=80, task_layers=499) == {"env": 200 * 80, "task": 20 * 499, "shared": 50}
