"""Pure parts of the Ray pool: routing groups to actors (sticky by env key, balanced), per-actor settings."""

from __future__ import annotations

import dataclasses

import pytest
from swebox.envs.cache import EnvSpec
from swebox.trainers.distributed.ray_pool import (
    RayPoolError,
    check_group,
    config_for_node,
    cpu_state_dict,
    env_key_of,
    per_actor_parallelism,
    route_groups,
)
from swebox.trainers.rl.rollout import Trajectory
from swebox.trainers.run.config import TrainConfig

from tests.trainers.rl.test_rollout import stub_task

N1, N2 = "node-1", "node-2"


def test_first_step_places_each_env_on_one_node_and_balances():
    # cap = ceil(4 / 2) = 2; 'a' goes to actor 0 (both empty, lowest index), its second task follows it;
    # 'b' finds actor 0 full and has no holder yet, so it opens actor 1.
    choice, holders = route_groups(["a", "b", "a", "b"], [N1, N2], {})
    assert choice == [0, 1, 0, 1]
    assert holders == {"a": frozenset({N1}), "b": frozenset({N2})}


def test_later_steps_are_sticky_by_env_key():
    holders = {"a": frozenset({N1}), "b": frozenset({N2})}
    # 'b' comes first this time; without stickiness it would take actor 0 (lowest index).
    choice, after = route_groups(["b", "b", "a", "a"], [N1, N2], holders)
    assert choice == [1, 1, 0, 0]
    assert after == holders


def test_one_env_spills_over_to_the_next_node_when_its_holder_is_full():
    # cap = 2: two groups stay on the holder, two spill to node 2, which then holds 'a' as well.
    choice, holders = route_groups(["a", "a", "a", "a"], [N1, N2], {"a": frozenset({N1})})
    assert choice == [0, 0, 1, 1]
    assert holders == {"a": frozenset({N1, N2})}


def test_two_actors_on_a_node_share_its_cache():
    # actors 0 and 1 on node 1, actor 2 on node 2; cap = ceil(3 / 3) = 1. 'a' is on node 1: its groups take
    # actors 0 and 1 (least loaded first), the third one has to go to node 2.
    choice, holders = route_groups(["a", "a", "a"], [N1, N1, N2], {"a": frozenset({N1})})
    assert choice == [0, 1, 2]
    assert holders["a"] == frozenset({N1, N2})


def test_uneven_batch_never_exceeds_the_cap():
    keys = ["a"] * 5 + ["b"] * 2
    choice, _ = route_groups(keys, [N1, N2, N2], {"b": frozenset({N2})})
    loads = [choice.count(a) for a in range(3)]
    assert max(loads) == 3  # ceil(7 / 3)
    assert sum(loads) == 7
    # 'b' (held by node 2) runs on node 2's actors only
    assert {choice[5], choice[6]} <= {1, 2}


def test_no_actor_is_a_clear_error():
    with pytest.raises(RayPoolError, match="at least one rollout actor"):
        route_groups(["a"], [], {})


def test_empty_batch():
    assert route_groups([], [N1], {}) == ([], {})


def test_per_actor_parallelism():
    assert per_actor_parallelism(8, 3) == 3
    assert per_actor_parallelism(2, 4) == 1
    assert per_actor_parallelism(6, 2) == 3


def test_config_for_node_fills_the_node_id_and_splits_episodes():
    cfg = TrainConfig()
    cfg = dataclasses.replace(
        cfg,
        env=dataclasses.replace(cfg.env, cache_dir="/tmp/swebox-cache/{node_id}"),
        rollout=dataclasses.replace(cfg.rollout, max_parallel_episodes=5),
    )
    mine = config_for_node(cfg, "abc123", actors=2)
    assert mine.env.cache_dir == "/tmp/swebox-cache/abc123"
    assert mine.rollout.max_parallel_episodes == 3
    assert cfg.env.cache_dir == "/tmp/swebox-cache/{node_id}"  # the trainer's config is untouched


def test_groups_are_routed_by_the_tasks_env_key():
    spec = EnvSpec(source="pypi:toolz==1.2.0", python="3.11", test_deps=("pytest",))
    assert env_key_of(stub_task("t1", env=spec)) == spec.key() == stub_task("t1", env=spec).env_key
    assert env_key_of(stub_task("t1")) == "task:t1"  # no env: a group of its own


def test_check_group_names_the_task_and_what_came_back():
    good = [Trajectory("t1", "t1#0", []), Trajectory("t1", "t1#1", [])]
    check_group(good, stub_task("t1"), 2)
    check_group([{"task_id": "t1"}] * 2, stub_task("t1"), 2)  # a custom worker's plain answers
    with pytest.raises(RayPoolError, match=r"expected 2 trajectories of task 't1'.*\['t1'\]"):
        check_group(good[:1], stub_task("t1"), 2)
    with pytest.raises(RayPoolError, match="'t2'"):
        check_group([good[0], Trajectory("t2", "t2#0", [])], stub_task("t1"), 2)


def test_cpu_state_dict_detaches_tensors():
    torch = pytest.importorskip("torch")
    w = torch.ones(2, requires_grad=True) * 3
    out = cpu_state_dict({"w": w, "step": 4})
    assert out["step"] == 4
    assert not out["w"].requires_grad
    assert out["w"].tolist() == [3.0, 3.0]
