"""Shared generation servers (trainers/policy/gen_server.py): config checks, GPU placement, stats, and a real server
actor on a one-node loopback Ray answering clients with the backend's own tokens, batching concurrent callers,
and taking new weights. test_gen_server_e2e.py runs a training step through a server on two nodes."""

from __future__ import annotations

import dataclasses
import math
import os
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # every Ray address on 127.0.0.1, before ray is imported

ray = pytest.importorskip("ray")
import torch  # noqa: E402
from swebox.trainers.distributed.ray_cluster import actor_gpus  # noqa: E402
from swebox.trainers.distributed.ray_pool import RayPoolError, RayWorkerPool  # noqa: E402
from swebox.trainers.policy import gen_server  # noqa: E402
from swebox.trainers.policy.models import build_builtin_tokenizer  # noqa: E402
from swebox.trainers.run.config import ConfigError, GenerationConfig, TrainConfig, load_config  # noqa: E402

from tests.trainers.ray_cluster import swebox_cluster  # noqa: E402
from tests.trainers.rl.test_rollout import ScriptedEpisode, stub_task  # noqa: E402

pytestmark = pytest.mark.timeout(300)
TOK = build_builtin_tokenizer()


def gen_config(**generation) -> TrainConfig:
    """A tiny random policy decoding greedily (temperature 0), so the same weights give the same tokens."""
    return load_config(
        None,
        [
            "generation.temperature=0",
            "generation.max_new_tokens=24",
            "generation.max_context_tokens=256",
            "model.max_position_embeddings=256",
            "generation.server_num_cpus=0.5",
            "ray.actor_num_cpus=0.5",
            *[f"generation.{k}={v}" for k, v in generation.items()],
        ],
    )


# ------------------------------------------------------------------------------------------------ config


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["generation.placement=servers"], r"generation\.placement"),
        (["generation.num_servers=0"], r"generation\.num_servers: expected >= 1; found 0"),
        (["generation.server_num_gpus=-1"], r"generation\.server_num_gpus: expected >= 0; found -1"),
        (["generation.server_num_cpus=-0.5"], r"generation\.server_num_cpus: expected >= 0; found -0\.5"),
        (
            ["generation.placement=server", "generation.backend=vllm", "generation.server_num_gpus=1"],
            r"server_num_gpus: expected 0 with backend 'vllm'.*vllm_tensor_parallel_size",
        ),
    ],
)
def test_bad_server_settings_are_clear_errors(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, overrides)


def test_openai_backend_cannot_be_served():
    with pytest.raises(
        ConfigError,
        match=r"generation\.placement: expected 'actor' with backend 'openai'; "
        r"found 'server'; an OpenAI-compatible server is already a server",
    ):
        GenerationConfig(backend="openai", openai_base_url="http://127.0.0.1:1/v1", placement="server")
    with pytest.raises(ConfigError, match="expected one of"):
        GenerationConfig(placement="everywhere")  # direct use, not through YAML, is checked too
    assert GenerationConfig().placement == "actor" and GenerationConfig().num_servers == 1


# ------------------------------------------------------------------------------------------------ placement


def test_gpus_of_servers_and_actors():
    plain = TrainConfig()
    vllm = load_config(None, ["generation.backend=vllm"])
    served_vllm = load_config(None, ["generation.backend=vllm", "generation.placement=server"])
    served_gpu = load_config(None, ["generation.placement=server", "generation.server_num_gpus=1"])
    # (actor GPUs, server GPUs): with servers the actors hold no GPUs whatever the backend
    assert (actor_gpus(plain), gen_server.server_gpus(plain)) == (0.0, 0.0)
    assert actor_gpus(vllm) == 1.0
    assert (actor_gpus(served_vllm), gen_server.server_gpus(served_vllm)) == (0.0, 1.0)
    assert (actor_gpus(served_gpu), gen_server.server_gpus(served_gpu)) == (0.0, 1.0)
    assert gen_server.gpu_setting(served_vllm) == "generation.vllm_tensor_parallel_size"
    assert gen_server.gpu_setting(served_gpu) == "generation.server_num_gpus"


def test_place_servers_round_robin_within_each_nodes_gpus():
    # the first node is preferred; a node hosts floor(GPUs / per_server) servers
    assert gen_server.place_servers([("a", 4.0), ("b", 2.0)], 2.0, 3) == ["a", "b", "a"]
    assert gen_server.place_servers([("cpu", 0.0), ("gpu", 8.0)], 2.0, 3) == ["gpu", "gpu", "gpu"]
    assert gen_server.place_servers([("a", 1.0), ("b", 3.0)], 1.5, 2) == ["b", "b"]
    # GPU-less servers fit anywhere
    assert gen_server.place_servers([("a", 0.0), ("b", 0.0)], 0.0, 3) == ["a", "b", "a"]
    assert gen_server.place_servers([("a", 0.0)], 0.0, 1) == ["a"]


def test_place_servers_errors_say_what_is_missing():
    with pytest.raises(
        gen_server.ServerPlacementError,
        match=r"expected a swebox node with 2 GPU\(s\) for a "
        r"generation server; found none .*--num-gpus N.*server_num_gpus",
    ):
        gen_server.place_servers([("aaaaaaaaaa", 0.0), ("bbbbbbbbbb", 1.0)], 2.0, 1, "generation.server_num_gpus")
    with pytest.raises(
        gen_server.ServerPlacementError,
        match=r"room for 3 generation server\(s\) of 1 GPU\(s\) "
        r"each.*found room for 2.*generation\.num_servers",
    ):
        gen_server.place_servers([("a", 1.0), ("b", 1.0)], 1.0, 3)


def test_merge_server_stats_by_hand():
    a = {"requests": 3, "prompts": 4, "batches": 2, "batch_max": 3, "queue_s": 1.0, "busy_s": 2.0}
    b = {"requests": 1, "prompts": 1, "batches": 1, "batch_max": 1, "queue_s": 0.5, "busy_s": 0.25}
    assert gen_server.merge_server_stats([a, b]) == {
        "gen/server_requests": 4.0,
        "gen/server_batches": 3.0,
        "gen/server_batch_mean": 5 / 3,
        "gen/server_batch_max": 3.0,
        "gen/server_queue_s": 1.5 / 5,
        "gen/server_busy_s": 2.25,
    }
    assert gen_server.merge_server_stats([gen_server.ServerStats().__dict__])["gen/server_batch_mean"] == 0.0
    assert set(gen_server.merge_server_stats([]).values()) == {0.0}  # no servers, or an idle step: zeros, no division


# ------------------------------------------------------------------------------------------------ a real server


@pytest.fixture(scope="module")
def cluster():
    with swebox_cluster(head_cpus=2, workers=()) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def served(cluster):
    """(config, a server actor holding the weights of ``direct``, direct: the same backend in this process)."""
    cfg = gen_config()
    torch.manual_seed(0)
    direct = gen_server.default_backend_factory(cfg)
    node = ray.get_runtime_context().get_node_id()
    [server] = gen_server.start_servers(cfg, [node], concurrency=16)
    ray.get(server.set_weights.remote(direct.model.state_dict(), 0))
    try:
        yield cfg, server, direct
    finally:
        ray.kill(server)


def prompts(n: int) -> list[list[int]]:
    return [TOK.encode(f"def f{i}(x):\n    return x + {i}", add_special_tokens=False) for i in range(n)]


def test_client_generates_what_the_backend_generates(served):
    _cfg, server, direct = served
    client = gen_server.ServerClient(server)
    for prompt in prompts(3):
        [mine] = client.generate([prompt], 24)
        [theirs] = direct.generate([prompt], 24)
        assert mine.token_ids == theirs.token_ids and len(mine.token_ids) > 0
        assert mine.finish_reason == theirs.finish_reason
        assert mine.logprobs == pytest.approx(theirs.logprobs, abs=1e-5)
    assert client.calls == 3 and client.take_versions() == [0] and client.take_versions() == []
    served_norm = ray.get(server.parameter.remote("model.norm.weight"))
    assert torch.equal(served_norm, direct.model.state_dict()["model.norm.weight"])


def test_concurrent_callers_are_batched_by_the_server(served):
    _cfg, server, direct = served
    ray.get(server.take_stats.remote())  # count from here
    batch = prompts(8)
    client = gen_server.ServerClient(server)
    with ThreadPoolExecutor(max_workers=8) as pool:  # 8 episodes of one rollout actor, each its own request
        answers = list(pool.map(lambda p: client.generate([p], 24)[0], batch))
    stats = ray.get(server.take_stats.remote())
    assert stats["requests"] == 8 and stats["prompts"] == 8
    assert stats["batch_max"] > 1 and stats["batches"] < 8, stats  # merged into fewer engine calls
    assert stats["busy_s"] > 0 and stats["queue_s"] > 0
    for prompt, answer in zip(batch, answers, strict=True):  # left padding in a batch: same greedy tokens
        [alone] = direct.generate([prompt], 24)
        assert answer.token_ids == alone.token_ids
        assert answer.logprobs == pytest.approx(alone.logprobs, abs=1e-4)


def test_update_weights_changes_the_servers_outputs(served):
    _cfg, server, direct = served
    client = gen_server.ServerClient(server)
    [prompt] = prompts(1)
    [before] = client.generate([prompt], 8)
    zeroed = {k: v.clone() for k, v in direct.model.state_dict().items()}
    zeroed["model.norm.weight"].zero_()  # every logit becomes 0: a uniform next-token distribution
    client.update_weights(zeroed)
    try:
        [after] = client.generate([prompt], 8)
        uniform = -math.log(direct.model.config.vocab_size)
        assert after.logprobs == pytest.approx([uniform] * len(after.token_ids), abs=1e-5)
        assert before.logprobs != pytest.approx(after.logprobs, abs=1e-3)
        assert client.take_versions() == [0, 1]  # update_weights counted one version on
    finally:
        ray.get(server.set_weights.remote(direct.model.state_dict(), 0))
    [again] = client.generate([prompt], 8)
    assert again.token_ids == before.token_ids


def test_served_rollout_worker_plays_episodes_through_the_server(served):
    cfg, server, _direct = served
    client = gen_server.ServerClient(server)
    two_turns = dataclasses.replace(cfg, env=dataclasses.replace(cfg.env, max_turns=2))
    worker = gen_server.ServedRolloutWorker(
        two_turns, client, episode_factory=lambda task, n: [ScriptedEpisode(turns=2) for _ in range(n)]
    )
    assert worker.model is None  # no policy copy on a rollout node
    out = worker.run([stub_task("t0")], group_size=3)
    assert [t.task_id for t in out] == ["t0"] * 3
    assert all(t.num_turns == 2 and not t.failed for t in out), [t.error for t in out]
    assert client.calls == 6 and client.take_versions() == [0]
    with pytest.raises(RuntimeError, match="sync the servers instead"):
        worker.set_weights({}, 1)


def test_no_node_with_the_servers_gpus_is_a_clear_error(cluster):
    cpus = ray.available_resources().get("CPU")
    cfg = gen_config(backend="vllm", placement="server")
    with pytest.raises(
        RayPoolError,
        match=r"expected a swebox node with 1 GPU\(s\) for a generation server; "
        r"found none .*vllm_tensor_parallel_size",
    ):
        RayWorkerPool(cfg)
    cfg = gen_config(placement="server", server_num_gpus=1)
    with pytest.raises(RayPoolError, match=r"with 1 GPU\(s\) for a generation server.*server_num_gpus"):
        RayWorkerPool(cfg)
    assert ray.is_initialized()
    # nothing left holding CPUs: Ray reports a release a moment after it, and the count at the start may still
    # have been missing a release of the test before, so the count must come back to at least what it was
    deadline = time.monotonic() + 60
    while (ray.available_resources().get("CPU") or 0) < cpus:
        assert time.monotonic() < deadline, f"CPUs still held 60 s later: {ray.available_resources()}"
        time.sleep(0.2)


def test_servers_yaml_loads_with_its_values():
    from pathlib import Path

    path = Path(__file__).resolve().parents[3] / "configs" / "grpo_qwen2.5-coder-7b_servers.yaml"
    c = load_config(path)
    assert (c.generation.backend, c.generation.placement, c.generation.num_servers) == ("vllm", "server", 8)
    # the servers fill the 8-GPU node the file describes; the rollout actors ask for none
    assert c.generation.num_servers * gen_server.server_gpus(c) == 8 and actor_gpus(c) == 0.0


class VersionProbeWorker:
    """A worker of a served pool: one generate call per task through the pool's server; a task holding ``swap``
    (a state dict) makes it load those weights into the server between two calls, as a broken trainer would."""

    def __init__(self, cfg: TrainConfig, backend) -> None:
        self.backend = backend

    def set_weights(self, state_dict, version: int) -> None:
        pass  # a served pool loads weights into its servers, not into its workers

    def preflight(self, tasks: list) -> list[str]:
        return []  # scripted: no layers to look for

    def close(self) -> None:
        pass

    def run(self, tasks: list[dict], group_size: int) -> list[dict]:
        for task in tasks:
            self.backend.generate([TOK.encode("x", add_special_tokens=False)], 2)
            if "swap" in task.metadata:  # the state dict as lists (a task's metadata is JSON)
                self.backend.update_weights({k: torch.tensor(v) for k, v in task.metadata["swap"].items()})
                self.backend.generate([TOK.encode("y", add_special_tokens=False)], 2)
        return [{"task_id": t.instance_id} for t in tasks for _ in range(group_size)]


def test_served_pool_syncs_the_servers_and_refuses_mixed_versions(served):
    _cfg, _server, direct = served
    pool = RayWorkerPool(gen_config(placement="server"), worker_factory=VersionProbeWorker)
    try:
        [server] = pool.servers
        assert ray.get(server.weights_version.remote()) == gen_server.INITIAL_VERSION
        weights = direct.model.state_dict()
        pool.set_weights(weights, 5)  # to the server (the probe workers have no set_weights at all)
        assert ray.get(server.weights_version.remote()) == 5
        assert pool.run_groups([stub_task("a"), stub_task("b")], 1) == [{"task_id": "a"}, {"task_id": "b"}]
        metrics = pool.step_metrics()
        assert (metrics["gen/server_requests"], metrics["gen/server_batch_max"]) == (2.0, 1.0)
        assert pool.step_metrics()["gen/server_requests"] == 0.0  # counted per step
        with pytest.raises(RayPoolError, match=r"from policy version 5; found versions \[5, 6\]"):
            swap = {k: v.tolist() for k, v in weights.items()}
            pool.run_groups([stub_task("c", metadata={"swap": swap})], 1)
    finally:
        pool.close()
    assert pool.servers == [] and pool.actors == []
