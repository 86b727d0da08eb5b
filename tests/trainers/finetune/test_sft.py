"""swebox sft: the data in the RL token layout (hand-checked), rejection sampling over records, the SFT loss, and an
e2e run on the shapes fixture tasks (expert episodes played and graded in real sandboxes, then fine-tuning)."""

from __future__ import annotations

import dataclasses
import gzip
import json
import math
import re
import subprocess

import pytest
import torch
from swebox.envs.agent.actions import ActionConfig, parse_action
from swebox.envs.agent.expert import expert_replies, zero_context
from swebox.envs.agent.formats import command_reply
from swebox.envs.tasks import Task
from swebox.trainers.finetune.sft_data import (
    ScriptedBackend,
    read_records,
    record_trajectories,
    trajectory_from_messages,
)
from swebox.trainers.policy.models import build_builtin_tokenizer, build_model
from swebox.trainers.rl.learner import Learner, make_batch
from swebox.trainers.rl.rollout import observation_delta_ids
from swebox.trainers.run.config import load_config

from tests.trainers.shapes import BUGGY, ORDER, shapes_files

TINY = [
    "model.hidden_size=32",
    "model.num_layers=1",
    "model.num_heads=2",
    "model.num_kv_heads=2",
    "model.intermediate_size=64",
]
CHAT = [
    {"role": "system", "content": "s"},
    {"role": "user", "content": "fix it"},
    {"role": "assistant", "content": "ls"},
    {"role": "user", "content": "a.py"},
    {"role": "assistant", "content": "done"},
    {"role": "user", "content": "unanswered"},
]
PATCH = (
    "diff --git a/pkg/ops.py b/pkg/ops.py\n--- a/pkg/ops.py\n+++ b/pkg/ops.py\n@@ -3,4 +3,4 @@ def f():\n"
    " a\n-    return x - 1\n+    return x + 1\n b\n"
)


@pytest.fixture(scope="module")
def tok():
    return build_builtin_tokenizer()


def test_messages_become_the_rollout_layout(tok):
    t = trajectory_from_messages(tok, CHAT, "x")
    assert (
        tok.decode(t.prompt_ids) == "<|im_start|>system\ns<|im_end|>\n<|im_start|>user\nfix it<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    model = [i for i, m in zip(t.response_ids, t.loss_mask, strict=True) if m]
    other = [i for i, m in zip(t.response_ids, t.loss_mask, strict=True) if not m]
    # the model's tokens: each text and the end-of-turn token that ends it, exactly as sampled ids would be
    assert model == [
        *tok.encode("ls", add_special_tokens=False),
        tok.eos_token_id,
        *tok.encode("done", add_special_tokens=False),
        tok.eos_token_id,
    ]
    assert other == observation_delta_ids(tok, "a.py", ended_turn=True)
    assert tok.decode(other) == "\n<|im_start|>user\na.py<|im_end|>\n<|im_start|>assistant\n"
    # the whole sequence is the chat template's rendering; the unanswered observation is left out
    assert tok.decode(t.prompt_ids + t.response_ids) + "\n" == tok.apply_chat_template(CHAT[:5], tokenize=False)
    assert t.num_turns == 2 and set(t.old_logprobs) == {0.0}
    # the batch's mask sits on the target positions of exactly those tokens
    batch = make_batch([t], torch.zeros(1), torch.ones(1, dtype=torch.bool), tok.pad_token_id)
    assert batch.targets[batch.mask.bool()].tolist() == model


def test_messages_that_do_not_alternate_are_errors(tok):
    with pytest.raises(ValueError, match="expected messages with an assistant turn"):
        trajectory_from_messages(tok, CHAT[:2])
    with pytest.raises(ValueError, match="expected the prompt's messages before"):
        trajectory_from_messages(tok, CHAT[2:3])
    with pytest.raises(ValueError, match="to alternate .* found 'assistant' at turn 1"):
        trajectory_from_messages(tok, [*CHAT[:3], CHAT[2]])


def test_rejection_sampling_keeps_resolved_records_and_says_what_it_left(tok, tmp_path):
    cfg = load_config(None, ["generation.max_context_tokens=64", "generation.max_new_tokens=16"])
    tokens = {"prompt_ids": [5, 6], "response_ids": [7, 8, 9], "loss_mask": [1, 0, 1]}
    records = [
        {"instance_id": "a", "resolved": True, "reward": 1.0, "messages": CHAT},
        {"instance_id": "b", "resolved": False, "reward": 0.0, "messages": CHAT},
        {"instance_id": "c", "resolved": True, "reward": 1.0, **tokens},
        {"instance_id": "d", "resolved": True, "reward": 1.0, "error": "sandbox died", **tokens},
        {
            "instance_id": "e",
            "resolved": True,
            "reward": 1.0,
            "prompt_ids": list(range(60)),
            "response_ids": [1] * 10,
            "loss_mask": [1] * 10,
        },
    ]
    path = tmp_path / "r.jsonl.gz"
    with gzip.open(path, "wt") as f:
        f.write("".join(json.dumps(r) + "\n" for r in records))
    kept, report = record_trajectories(read_records(path), tok, cfg)
    assert [t.task_id for t in kept] == ["a", "c"]
    assert kept[1].prompt_ids == [5, 6] and kept[1].loss_mask == [1, 0, 1]  # token records are used as they are
    assert report.kept == 2 and report.dropped == {
        "not resolved": 1,
        "failed": 1,
        "longer than generation.max_context_tokens=64": 1,
    }
    assert str(report).startswith("2 kept; left out: 1 not resolved (e.g. b)")
    with pytest.raises(ValueError, match="expected a 'resolved' field"):
        record_trajectories([{"instance_id": "x", "messages": CHAT}], tok, cfg)
    with pytest.raises(ValueError, match="expected the episode as 'messages', as 'prompt' and 'turns', or as"):
        record_trajectories([{"instance_id": "x", "resolved": True, "reward": 1.0}], tok, cfg)
    with pytest.raises(ValueError, match="expected token ids of this tokenizer"):
        record_trajectories(
            [{"resolved": True, "prompt_ids": [10**6], "response_ids": [1], "loss_mask": [1]}], tok, cfg
        )
    (tmp_path / "bad.jsonl").write_text('{"resolved": true}\nnot json\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:2: expected one JSON object per line"):
        read_records(tmp_path / "bad.jsonl")
    with pytest.raises(FileNotFoundError, match="swebox eval --out"):
        read_records(tmp_path / "missing.jsonl")


def test_expert_replies_inspect_apply_test_submit_in_every_action_style():
    task = Task(
        instance_id="t",
        patch=PATCH,
        FAIL_TO_PASS=["tests/test_ops.py::test_f[a b]"],
        PASS_TO_PASS=["tests/test_ops.py::test_g"],
    )
    inspect, apply, test, submit = expert_replies(task)
    assert inspect == "```bash\ncd /testbed && sed -n '3,6p' pkg/ops.py\n```"  # the first hunk's old lines
    assert "git apply /tmp/gold.diff" in apply and PATCH in apply
    short = expert_replies(task, minimal_patch=True)[1]
    assert "git apply --unidiff-zero /tmp/gold.diff" in short and zero_context(PATCH) in short
    assert (
        zero_context(PATCH) == "--- a/pkg/ops.py\n+++ b/pkg/ops.py\n@@ -4 +4 @@\n-    return x - 1\n+    return x + 1\n"
    )
    assert test == "```bash\ncd /testbed && /venv/bin/python -m pytest -q 'tests/test_ops.py::test_f[a b]'\n```"
    assert "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT" in submit
    assert len(expert_replies(dataclasses.replace(task, hidden_tests=True))) == 3  # no tests to run in the sandbox
    for style in ("bash_block", "xml_function", "json_tool_call"):
        action = parse_action(command_reply("cd /testbed && echo 'a \"b\"'", style), ActionConfig(style=style))
        assert action.tool == "bash" and action.arguments["command"] == "cd /testbed && echo 'a \"b\"'", (style, action)
    with pytest.raises(ValueError, match="action style: expected one of"):
        command_reply("ls", "yaml")


def _git(repo, *args: str, stdin: str | None = None) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], input=stdin, capture_output=True, text=True, check=True
    ).stdout


@pytest.mark.parametrize("change", ["replace", "insert_and_delete", "at_the_ends", "two_files"])
def test_a_minimal_patch_applies_with_git_to_the_same_tree_as_the_gold_patch(tmp_path, change):
    """zero_context() against real git: ``git apply --unidiff-zero`` of the shortened patch gives the tree the
    full patch gives (runs of changes split into hunks of their own; pure inserts and deletes numbered from the
    line before, as ``diff -U0`` numbers them), and the patch really is shorter."""
    lines = [f"line {i}" for i in range(1, 41)]
    edits = {
        "replace": {"a.py": lambda ls: ls[:9] + ["changed 10"] + ls[10:]},
        "insert_and_delete": {"a.py": lambda ls: ls[:5] + ["new a", "new b"] + ls[5:20] + ls[23:30] + ["x"] + ls[31:]},
        "at_the_ends": {"a.py": lambda ls: ["first"] + ls[1:-1]},
        "two_files": {"a.py": lambda ls: ls[:2] + ls[3:], "pkg/b.py": lambda ls: ls + ["appended"]},
    }[change]
    repo = tmp_path / "repo"
    (repo / "pkg").mkdir(parents=True)
    for name in ("a.py", "pkg/b.py"):
        (repo / name).write_text("\n".join(lines) + "\n")
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "base")
    for name, edit in edits.items():
        (repo / name).write_text("\n".join(edit(lines)) + "\n")
    gold = _git(repo, "diff")
    u0 = re.sub(r"^(diff --git |index ).*\n", "", _git(repo, "diff", "-U0"), flags=re.MULTILINE)
    assert zero_context(gold) == re.sub(r"^(@@ [^@]* @@).*$", r"\1", u0, flags=re.MULTILINE)  # git's own -U0
    want = _git(repo, "stash", "create")
    want_tree = _git(repo, "rev-parse", want.strip() + "^{tree}").strip()
    _git(repo, "checkout", "-q", "--", ".")
    short = zero_context(gold)
    assert short is not None and len(short) < len(gold)
    assert not [line for line in short.splitlines() if line.startswith(" ")], short  # no context lines left
    _git(repo, "apply", "--unidiff-zero", "-", stdin=short)
    _git(repo, "add", "-A")
    assert _git(repo, "write-tree").strip() == want_tree, short


def test_a_patch_that_needs_its_full_form_is_not_shortened():
    created = "diff --git a/n.py b/n.py\nnew file mode 100644\n--- /dev/null\n+++ b/n.py\n@@ -0,0 +1 @@\n+x\n"
    no_newline = PATCH.rstrip("\n") + "\n\\ No newline at end of file\n"
    assert zero_context(created) is None and zero_context(no_newline) is None
    task = Task(instance_id="t", patch=created, FAIL_TO_PASS=["tests/test_n.py::test_x"])
    assert "git apply /tmp/gold.diff" in expert_replies(task, minimal_patch=True)[1]  # applied whole


def test_scripted_backend_plays_its_turns_and_is_cut_like_a_model(tok):
    backend = ScriptedBackend(tok, ["ls", "echo done"])
    first = backend.generate([[1]], 100)[0]
    assert first.token_ids == [*tok.encode("ls", add_special_tokens=False), tok.eos_token_id]
    assert first.finish_reason == "stop" and first.logprobs == [0.0] * len(first.token_ids)
    cut = backend.generate([[1]], 2)[0]
    assert len(cut.token_ids) == 2 and cut.finish_reason == "length"


def test_sft_loss_is_the_nll_of_the_model_tokens(tok):
    cfg = load_config(None, [*TINY, "optim.lr=1e-3", "optim.micro_batch_size=1"])
    torch.manual_seed(0)
    model = build_model(cfg.model, tok)
    trajs = [trajectory_from_messages(tok, CHAT, "a"), trajectory_from_messages(tok, CHAT[:3], "b")]
    batch = make_batch(trajs, torch.zeros(2), torch.ones(2, dtype=torch.bool), tok.pad_token_id)
    with torch.no_grad():  # by hand: -mean over the 2 * 5 + 3 model tokens of log softmax at their positions
        nll = []
        for t in trajs:
            ids = torch.tensor([t.prompt_ids + t.response_ids])
            logp = torch.log_softmax(model(input_ids=ids).logits[0, :-1].float(), -1)
            p = len(t.prompt_ids)
            nll += [-float(logp[p - 1 + j, t.response_ids[j]]) for j, m in enumerate(t.loss_mask) if m]
    assert len(nll) == 5 + 3
    learner = Learner(cfg, model)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    metrics = learner.sft_update(batch)  # micro-batches of one row accumulate to the batch's token mean
    assert metrics["sft/loss"] == pytest.approx(sum(nll) / len(nll), rel=1e-5)
    assert metrics["sft/tokens"] == 8.0 and 0.0 <= metrics["sft/token_accuracy"] <= 1.0
    # the chance of sampling each trajectory's model tokens exactly (before the step), averaged over the batch
    exact = (math.exp(-sum(nll[:5])) + math.exp(-sum(nll[5:]))) / 2
    assert metrics["sft/sequence_prob"] == pytest.approx(exact, rel=1e-4)
    assert metrics["policy/lr"] == 1e-3 and metrics["policy/grad_norm"] > 0
    assert any(not torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_sft_stops_at_the_sequence_prob_it_was_asked_for(tok, tmp_path):
    from swebox.trainers.finetune.sft import run_sft

    trajs = [trajectory_from_messages(tok, CHAT[:3], "a"), trajectory_from_messages(tok, CHAT[:3], "b")]
    base = [
        *TINY,
        "logging.wandb=disabled",
        "logging.progress=false",
        "sft.lr=1e-2",
        "sft.epochs=300",
        "sft.batch_size=1",
    ]
    cfg = load_config(None, [*base, f"logging.run_dir={tmp_path / 'stop'}", "sft.stop_at_sequence_prob=0.5"])
    result = run_sft(cfg, trajectories=trajs, echo=lambda *_: None)
    probs = [r["sft/sequence_prob"] for r in result.records]
    epochs = [probs[i : i + 2] for i in range(0, len(probs), 2)]  # two steps of one trajectory per epoch
    assert len(probs) < 600 and len(probs) % 2 == 0  # stopped at the end of an epoch, long before the last
    assert sum(epochs[-1]) / 2 >= 0.5 and all(sum(e) / 2 < 0.5 for e in epochs[:-1])
    assert result.task_ids == ["a", "b"] and (result.policy / "config.json").exists()
    with pytest.raises(ValueError, match=r"sft.stop_at_sequence_prob: expected in \[0, 1\]; found 2"):
        load_config(None, ["sft.stop_at_sequence_prob=2"])


def test_tasks_whose_expert_turn_passes_the_sampling_budget_are_named(tok, tmp_path):
    # the demo keeps such tasks out of GRPO (scripts/demo.py): a policy sampling under
    # generation.max_new_tokens cannot reproduce the turn it was fine-tuned on
    from swebox.trainers.finetune.sft import run_sft

    short, long = trajectory_from_messages(tok, CHAT[:3], "short"), trajectory_from_messages(tok, CHAT[:3], "long")
    short.turns, long.turns = [{"tokens": 10}, {"tokens": 16}], [{"tokens": 10}, {"tokens": 17}]
    cfg = load_config(
        None,
        [
            *TINY,
            "logging.wandb=disabled",
            "logging.progress=false",
            "sft.epochs=1",
            f"logging.run_dir={tmp_path / 'sft'}",
            "generation.max_new_tokens=16",
        ],
    )
    result = run_sft(cfg, trajectories=[short, long], echo=lambda *_: None)
    assert result.task_ids == ["short", "long"] and result.long_turn_ids == ["long"]


@pytest.mark.e2e
@pytest.mark.timeout(600)
def test_sft_on_gold_episodes_and_on_eval_records(shapes_env, tmp_path):
    """Expert episodes in real sandboxes: the gold patch resolves and is kept, a wrong patch is not; then SFT
    learns them (loss falls), writes metrics, a checkpoint and a policy folder; eval records train too."""
    from swebox.trainers.finetune.sft import run_sft
    from swebox.trainers.rl.rollout import swe_episode_factory
    from swebox.trainers.run.tracking import read_metrics

    layer, tasks, candidates = shapes_env
    name = next(iter(BUGGY))
    wrong = dataclasses.replace(tasks[0], instance_id="shapes-wrong", patch=candidates[name][(ORDER[0][0] + 1) % 4])
    chosen = [tasks[0], tasks[1], wrong]
    cfg = load_config(
        "configs/grpo_tiny_cpu.yaml",
        [
            *TINY,
            f"logging.run_dir={tmp_path / 'sft'}",
            "logging.wandb=disabled",
            "generation.max_new_tokens=512",
            "generation.max_context_tokens=2048",
            "env.max_turns=5",
            "sft.epochs=5",
            "sft.batch_size=2",
            "optim.lr=1e-2",
            "optim.micro_batch_size=2",
            "checkpoint.every_steps=0",
        ],
    )
    factory = swe_episode_factory(cfg, layers=[layer.path])
    result = run_sft(cfg, tasks=chosen, episode_factory=factory, echo=lambda *_: None)
    # by real grading: the two gold episodes resolve (inspect, apply, test, submit), the wrong patch does not
    assert result.report.kept == 2 and result.report.dropped == {"not resolved": 1}
    assert result.report.examples["not resolved"] == "shapes-wrong"
    losses = [r["sft/loss"] for r in result.records]
    assert len(losses) == 5 and losses[-1] < 0.8 * losses[0], losses
    assert [r["step"] for r in read_metrics(tmp_path / "sft")] == list(range(1, 6))
    assert (tmp_path / "sft" / "checkpoints" / "step_00000005").is_dir()
    assert (result.policy / "config.json").exists() and (result.policy / "tokenizer.json").exists()
    # the fine-tuned folder is a policy GRPO and eval start from: model.init=pretrained model.path=...
    start = load_config(None, ["model.init=pretrained", f"model.path={result.policy}"])
    from swebox.trainers.policy.models import build_tokenizer

    again = build_tokenizer(start.model)
    assert again.encode("git apply") == build_builtin_tokenizer().encode("git apply")
    assert again.apply_chat_template(CHAT[:2], tokenize=False) == build_builtin_tokenizer().apply_chat_template(
        CHAT[:2], tokenize=False
    )


@pytest.mark.e2e
@pytest.mark.timeout(600)
def test_swebox_sft_on_eval_records_keeps_the_resolved(shapes_env, tmp_path, capsys):
    """`swebox eval --out` records (gold: resolved, empty: not) -> `swebox sft --data`: rejection sampling."""
    from swebox.scripts.cli import main
    from swebox.trainers.run.tracking import read_metrics

    dirs = shapes_files(shapes_env, tmp_path, 2)
    for policy in ("gold", "empty"):
        assert (
            main(
                [
                    "eval",
                    "--tasks",
                    str(tmp_path / "tasks.jsonl"),
                    "--policy",
                    policy,
                    "--layers",
                    str(dirs),
                    "--out",
                    str(tmp_path / f"{policy}.jsonl"),
                ]
            )
            == 0
        )
    lines = [line for p in ("gold", "empty") for line in (tmp_path / f"{p}.jsonl").read_text().splitlines()]
    records = [json.loads(line) for line in lines]
    assert [r["resolved"] for r in records] == [True, True, False, False]
    assert [m["role"] for m in records[0]["messages"]][-3:] == ["assistant", "user", "assistant"]
    (tmp_path / "all.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    capsys.readouterr()
    assert (
        main(
            [
                "sft",
                "--config",
                "configs/grpo_tiny_cpu.yaml",
                "--data",
                str(tmp_path / "all.jsonl"),
                *TINY,
                f"logging.run_dir={tmp_path / 'sft'}",
                "logging.wandb=disabled",
                "sft.epochs=2",
                "sft.batch_size=2",
                "generation.max_context_tokens=2048",
                "checkpoint.every_steps=0",
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert "2 kept; left out: 2 not resolved" in printed and "sft: 2 steps on 2 trajectories" in printed, printed
    assert [r["step"] for r in read_metrics(tmp_path / "sft")] == [1, 2]
    assert (tmp_path / "sft" / "policy" / "config.json").exists()

    # the same command again: the run folder holds a run; one line, nothing in it touched
    stamps = {p: p.stat().st_mtime_ns for p in (tmp_path / "sft").rglob("*")}
    assert (
        main(
            [
                "sft",
                "--config",
                "configs/grpo_tiny_cpu.yaml",
                "--data",
                str(tmp_path / "all.jsonl"),
                *TINY,
                f"logging.run_dir={tmp_path / 'sft'}",
                "logging.wandb=disabled",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert (
        f"logging.run_dir={tmp_path / 'sft'}: expected a new or empty run folder; found an earlier run "
        "(metrics.jsonl up to step 2, checkpoint "
    ) in lines[0] and "policy/). Start a new run with " in lines[0]
    assert {p: p.stat().st_mtime_ns for p in (tmp_path / "sft").rglob("*")} == stamps


@pytest.mark.e2e
@pytest.mark.timeout(600)
def test_the_readmes_sft_command_on_the_tiny_config_keeps_the_patch_turn_whole(tmp_path, calc_layer, capsys):
    """README's `swebox sft --config configs/grpo_tiny_cpu.yaml --data gold --tasks ... env.layer_store=...
    logging.run_dir=...` as written: generation.max_new_tokens 64 used to cut the expert's patch turn (every
    episode unresolved, "0 kept", a traceback). Expert turns are bounded by the context only, the long turn is
    reported by the limit's name; a task whose gold patch is wrong is still left out, and a context too small
    for the patch turn is named in one line."""
    from swebox.envs.cache import LayerStore
    from swebox.scripts.cli import main
    from swebox.trainers.run.tracking import read_metrics

    from tests.calc import CALC_ENV, GOLD, calc_task

    store = LayerStore(tmp_path / "store", fmt="tar.gz")
    with store.lock(CALC_ENV.key()):
        store.publish(CALC_ENV.key(), calc_layer, kind="env")
    wrong = calc_task(instance_id="calc-wrong", patch=GOLD.replace("+    return a + b", "+    return a * b"))
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps(t.to_dict()) + "\n" for t in (calc_task(), wrong)))
    command = [
        "sft",
        "--config",
        "configs/grpo_tiny_cpu.yaml",
        "--data",
        "gold",
        "--tasks",
        str(tasks),
        f"env.layer_store={store.root}",
        f"env.cache_dir={tmp_path / 'node'}",
        "logging.wandb=disabled",
    ]
    assert main([*command, f"logging.run_dir={tmp_path / 'sft'}"]) == 0
    out = capsys.readouterr().out
    assert "sft data (gold): 1 kept; left out: 1 not resolved (e.g. calc-wrong)" in out, out
    note = next(line for line in out.splitlines() if line.startswith("sft data: the longest expert turn"))
    longest = int(note.split(" is ")[1].split()[0])
    assert longest > 64 and "generation.max_new_tokens=64" in note and f">={longest}" in note
    assert len(read_metrics(tmp_path / "sft")) >= 1 and (tmp_path / "sft" / "policy" / "config.json").exists()

    # a context with room for the prompt, not for the expert's turns: nothing to train on, one line naming the
    # limit and what to change
    from swebox.envs.episodes.groups import group
    from swebox.trainers.policy.models import build_tokenizer
    from swebox.trainers.rl.rollout import prompt_ids

    cfg = load_config("configs/grpo_tiny_cpu.yaml")
    with group(calc_task(), 1, layers=[calc_layer], config=cfg.env.episode()) as g:
        prompt = len(prompt_ids(build_tokenizer(cfg.model), g[0].reset()))
    context = prompt + 20
    assert (
        main(
            [
                *command,
                f"logging.run_dir={tmp_path / 'small'}",
                f"generation.max_context_tokens={context}",
                "generation.max_new_tokens=16",
            ]
        )
        == 2
    )
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in captured.err, captured.err
    assert "sft.data=gold: expected trajectories to train on; found none (0 kept; left out: " in lines[0]
    assert f"2 longer than generation.max_context_tokens={context}" in lines[0], lines[0]
    assert "raise generation.max_context_tokens" in lines[0]
