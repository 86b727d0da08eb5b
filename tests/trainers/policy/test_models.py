"""The builtin tokenizer and the random tiny policy: local, deterministic, ChatML."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from swebox.trainers.policy.models import build_builtin_tokenizer, build_model, build_tokenizer, num_parameters
from swebox.trainers.run.config import ModelConfig


def test_builtin_tokenizer_round_trips_any_text_and_has_chatml():
    tok = build_builtin_tokenizer()
    text = "def f(x):\n    return x + 1  # héllo ✓ \x00 tabs\t"
    assert tok.decode(tok.encode(text, add_special_tokens=False)) == text  # byte-level: nothing is unknown
    rendered = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    assert rendered == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert tok.eos_token == "<|im_end|>" and tok.pad_token_id != tok.eos_token_id
    assert len(tok) < 1024


def test_builtin_tokenizer_is_the_same_in_every_process():
    code = (
        "from swebox.trainers.policy.models import build_builtin_tokenizer as b; import hashlib; "
        "print(hashlib.sha256(b().backend_tokenizer.to_str().encode()).hexdigest())"
    )
    outs = {
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
        for _ in range(2)
    }
    assert len(outs) == 1


def test_random_model_is_sized_by_the_config_and_seeded():
    cfg = ModelConfig(hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1, intermediate_size=64)
    tok = build_tokenizer(cfg)
    torch.manual_seed(3)
    a = build_model(cfg, tok)
    torch.manual_seed(3)
    b = build_model(cfg, tok)
    assert a.config.vocab_size == len(tok) and a.config.num_hidden_layers == 1
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values(), strict=True))
    # tied embeddings: vocab*32 once, plus one block
    assert len(tok) * 32 < num_parameters(a) < len(tok) * 32 + 20_000


def test_pretrained_without_a_folder_is_a_clear_error(tmp_path):
    cfg = ModelConfig(init="pretrained", path=str(tmp_path / "missing"), tokenizer=str(tmp_path / "missing"))
    with pytest.raises(FileNotFoundError, match="model.tokenizer: expected 'builtin' or a local tokenizer folder"):
        build_tokenizer(cfg)


def test_a_saved_policy_loads_the_builtin_tokenizer_it_was_trained_with(tmp_path):
    # AutoTokenizer would take Qwen2Tokenizer from config.json's model type, whose pre-tokenizer splits digits
    # one by one: "191 tests" became other ids than the SFT policy had learnt, and GRPO sampled noise from it
    cfg = ModelConfig(hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1, intermediate_size=64)
    tok = build_tokenizer(cfg)
    build_model(cfg, tok).save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    loaded = build_tokenizer(ModelConfig(init="pretrained", path=str(tmp_path)))
    chat = [{"role": "user", "content": "The other 191 tests I ran still pass: sed -n '91,97p' core.py"}]
    assert loaded.apply_chat_template(chat, add_generation_prompt=True) == tok.apply_chat_template(
        chat, add_generation_prompt=True
    )
    assert loaded.encode("x = 12345\n", add_special_tokens=False) == tok.encode("x = 12345\n", add_special_tokens=False)
    assert (loaded.eos_token_id, loaded.pad_token_id, loaded.padding_side) == (
        tok.eos_token_id,
        tok.pad_token_id,
        "left",
    )
