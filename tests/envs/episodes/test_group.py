"""GRPO groups: n episodes forked from one prepared start state, independent of each other."""

from __future__ import annotations

import pytest
from swebox.envs import group

from tests.calc import GOLD, SUBMIT, apply_patch, bash, calc_task


def test_group_episodes_share_the_prepared_start_and_are_independent(calc_layer):
    task = calc_task(setup_commands=["echo once >> /testbed/SETUP_RUNS"])
    with group(task, 3, layers=[calc_layer], config={"max_turns": 4}) as g:
        assert len(g) == 3 and g.start.prepared and len(g.start.base_tree) == 40
        snapshot = g.start.layers[-1].path
        assert snapshot.is_dir()
        for ep in g:
            ep.reset()
        assert g[0].step(bash("cat /testbed/SETUP_RUNS")).observation.count("once") == 1
        g[0].step(apply_patch(GOLD))
        g[1].step(bash("rm -rf /testbed/calc"))
        rewards = [ep.step(SUBMIT).reward for ep in g]
        assert rewards == [1.0, 0.0, 0.0]
        assert g[2].metrics["env/resolved"] == 0.0 and g[0].metrics["env/resolved"] == 1.0
        g[1].reset()  # its own overlay dropped: back to the prepared state, setup not run again
        assert g[1].step(bash("cat /testbed/SETUP_RUNS; ls /testbed/calc")).observation.count("once") == 1
    assert not snapshot.exists()


def test_group_rejects_bad_sizes_and_reports_setup_failures(calc_layer):
    with pytest.raises(ValueError, match="expected a whole number of episodes >= 1"):
        group(calc_task(), 0, layers=[calc_layer])
    with pytest.raises(RuntimeError, match="setup command 'exit 3' failed"):
        group(calc_task(setup_commands=["exit 3"]), 2, layers=[calc_layer])
