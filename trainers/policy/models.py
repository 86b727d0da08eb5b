"""The policy and its tokenizer: a pretrained model from a local folder, or a tiny random one built here.

Nothing is downloaded. ``model.init: random`` builds a causal LM from a transformers config sized by
:class:`~swebox.trainers.run.config.ModelConfig`; ``model.tokenizer: builtin`` is a byte-level BPE tokenizer
trained in a few milliseconds on a small corpus kept in this module, with a ChatML chat template (the
Qwen2 convention: ``<|im_start|>role\\n...<|im_end|>\\n``). Byte-level means every string has an encoding
(observations can hold any text), and the training is deterministic, so every process that builds the
tokenizer (the learner, each rollout actor) gets the same ids.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from swebox.trainers.run.config import ModelConfig

IM_START, IM_END, PAD = "<|im_start|>", "<|im_end|>", "<|pad|>"
EOS = IM_END
"""A turn ends with <|im_end|>: it is the end-of-sequence token that stops generation."""
SPECIAL_TOKENS = ("<|endoftext|>", IM_START, IM_END, PAD)
BUILTIN_VOCAB_SIZE = 1024
"""Upper bound of the builtin tokenizer's vocabulary; the corpus below yields fewer merges than that."""

# The ChatML template of Qwen2.5 with its tool-call branches (and without its default system prompt): messages
# with a role and a string content render as plain ChatML; ``tools`` go into the system turn, an assistant's
# tool calls are written as Hermes <tool_call> blocks, and tool results come back in a user turn as
# <tool_response> blocks, as Qwen's own template does (envs/gateway/tool_text.py parses the model's calls).
CHAT_TEMPLATE = (
    "{%- if tools %}"
    "{{- '<|im_start|>system\\n' }}"
    "{%- if messages[0]['role'] == 'system' %}{{- messages[0]['content'] + '\\n\\n' }}{%- endif %}"
    "{{- '# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n"
    "You are provided with function signatures within <tools></tools> XML tags:\\n<tools>' }}"
    "{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}"
    "{{- '\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments "
    "within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\\"name\\\": <function-name>, "
    "\\\"arguments\\\": <args-json-object>}\\n</tool_call><|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if tools and loop.first and message['role'] == 'system' %}"
    "{%- elif message['role'] == 'assistant' and message.get('tool_calls') %}"
    "{{- '<|im_start|>assistant' }}"
    "{%- if message['content'] %}{{- '\\n' + message['content'] }}{%- endif %}"
    "{%- for tool_call in message['tool_calls'] %}"
    "{%- if tool_call['function'] is defined %}{%- set tool_call = tool_call['function'] %}{%- endif %}"
    "{{- '\\n<tool_call>\\n{\\\"name\\\": \\\"' + tool_call['name'] + '\\\", \\\"arguments\\\": ' }}"
    "{{- tool_call['arguments'] | tojson }}{{- '}\\n</tool_call>' }}"
    "{%- endfor %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- elif message['role'] == 'tool' %}"
    "{%- if loop.first or messages[loop.index0 - 1]['role'] != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\\n<tool_response>\\n' + message['content'] + '\\n</tool_response>' }}"
    "{%- if loop.last or messages[loop.index0 + 1]['role'] != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- else %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

# What the tokenizer's merges are learnt from: the kinds of text an SWE episode holds (shell commands,
# Python, unified diffs, pytest output, chat roles). Changing it changes the ids: bump nothing silently,
# a checkpoint stores its tokenizer (save_pretrained) so old runs keep theirs.
_CORPUS = r"""
system
user
assistant
You are a software engineer. Fix the bug in the repository at /testbed so that the tests pass.
Reply with exactly one bash code block per turn. When you are done, run:
echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT
```bash
cd /testbed && ls -la && git status && git diff
grep -rn "def " --include=*.py . | head -50
sed -n 1,80p src/package/module.py
cat tests/test_module.py
python -m pytest -q tests/test_module.py -x
/venv/bin/python -m pytest -q
find . -name "*.py" -not -path "./.git/*"
git apply /tmp/patch.diff
```
diff --git a/calc/ops.py b/calc/ops.py
index 3f2a1b0..8c9d2e1 100644
--- a/calc/ops.py
+++ b/calc/ops.py
@@ -1,5 +1,5 @@
 def add(a, b):
-    return a - b
+    return a + b


 def sub(a, b):
import os
import re
import sys
from pathlib import Path


def parse(text: str) -> list[str]:
    \"\"\"Split the text into words.\"\"\"
    if not text:
        return []
    return [word.strip() for word in text.split(",") if word]


class Counter:
    def __init__(self, start=0):
        self.value = start

    def increment(self, step=1):
        self.value += step
        return self.value


for i in range(10):
    while True:
        break
    if i % 2 == 0 and i > 3 or i is None:
        print(i, file=sys.stderr)
    else:
        raise ValueError(f"unexpected value {i!r}")
============================= test session starts ==============================
collected 12 items

tests/test_ops.py ..F.........                                          [100%]
FAILED tests/test_ops.py::test_add - assert -1 == 5
AssertionError: assert 0 == 1
Traceback (most recent call last):
  File "/testbed/calc/ops.py", line 2, in add
1 failed, 11 passed in 0.05s
Which candidate patch fixes the bug? Answer with its number: 0 1 2 3 4 5 6 7 8 9
Candidate 0: Candidate 1: Candidate 2: Candidate 3:
The answer is 0. The answer is 1. The answer is 2. The answer is 3.
exit code 0
exit code 1
Observation: command not found
"""


def builtin_corpus() -> list[str]:
    """The lines the builtin tokenizer learns its merges from (also a handy text sample for tests)."""
    return [line for line in _CORPUS.splitlines() if line.strip()] * 4


def build_builtin_tokenizer(vocab_size: int = BUILTIN_VOCAB_SIZE) -> Any:
    """A byte-level BPE ``PreTrainedTokenizerFast`` trained on :func:`builtin_corpus`, with ChatML."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    core.train_from_iterator(builtin_corpus(), trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, eos_token=EOS, pad_token=PAD, bos_token=None, unk_token=None
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    # generation and training pad on the left: a batch's last positions then line up for decoding
    tokenizer.padding_side = "left"
    return tokenizer


def build_tokenizer(cfg: ModelConfig) -> Any:
    """The policy's tokenizer: builtin, a tokenizer folder, or the pretrained model's own folder."""
    name = cfg.tokenizer or ("builtin" if cfg.init == "random" else cfg.path)
    if name == "builtin":
        return build_builtin_tokenizer()
    from transformers import AutoTokenizer

    if not Path(name).is_dir():
        raise FileNotFoundError(
            f"model.tokenizer: expected 'builtin' or a local tokenizer folder; found {name!r}, which is not a "
            "folder; set model.tokenizer=builtin or point it at a folder with tokenizer.json (nothing is "
            "downloaded)"
        )
    tokenizer = _tokenizer_class(Path(name), AutoTokenizer).from_pretrained(name, local_files_only=True)
    if tokenizer.chat_template is None:
        raise ValueError(
            f"model.tokenizer: expected a tokenizer with a chat template; found none in {name}; "
            "use an instruct/chat model's tokenizer or model.tokenizer=builtin"
        )
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    return tokenizer


def _tokenizer_class(folder: Path, auto: Any) -> Any:
    """The class a tokenizer folder was saved from when it is the plain fast tokenizer (the builtin one, saved
    with a policy by ``swebox sft`` or a checkpoint), else AutoTokenizer.

    AutoTokenizer picks the class from config.json's model type (Qwen2Tokenizer for a qwen2 policy), and that
    class brings its own pre-tokenizer (digits one by one) instead of the folder's tokenizer.json: the same
    text then encodes to other ids than the ones the policy was trained on.
    """
    import json

    from transformers import PreTrainedTokenizerFast

    try:
        saved = json.loads((folder / "tokenizer_config.json").read_text()).get("tokenizer_class")
    except (OSError, ValueError):
        return auto
    return PreTrainedTokenizerFast if saved in ("TokenizersBackend", "PreTrainedTokenizerFast") else auto


_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def random_model_config(cfg: ModelConfig, vocab_size: int, pad_token_id: int | None = None) -> Any:
    """The transformers config of a random model sized by ``cfg`` (architecture = a model type)."""
    from transformers import CONFIG_MAPPING

    if cfg.architecture not in CONFIG_MAPPING:
        raise ValueError(
            f"model.architecture: expected a transformers model type such as 'qwen2' or 'llama'; found "
            f"{cfg.architecture!r}; pick one of the keys of transformers.CONFIG_MAPPING"
        )
    return CONFIG_MAPPING[cfg.architecture](
        vocab_size=vocab_size,
        hidden_size=cfg.hidden_size,
        num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads,
        num_key_value_heads=cfg.num_kv_heads,
        intermediate_size=cfg.intermediate_size,
        max_position_embeddings=cfg.max_position_embeddings,
        tie_word_embeddings=True,
        pad_token_id=pad_token_id,
        # 1/sqrt(width) (Xavier-like) rather than the 0.02 of large models: with 0.02 a tiny model's attention
        # and MLP outputs are ~1% of the residual stream, so the next-token distribution barely depends on
        # the context and RL from scratch cannot learn prompt-dependent answers in minutes
        initializer_range=cfg.hidden_size**-0.5,
    )


def build_model(cfg: ModelConfig, tokenizer: Any | None = None) -> torch.nn.Module:
    """The policy as a transformers causal LM: loaded from ``cfg.path`` or randomly initialised.

    A random model's weights come from torch's RNG: seed it first for a reproducible start. Its vocabulary
    is the tokenizer's (``len(tokenizer)``; the builtin one when ``tokenizer`` is None).
    """
    from transformers import AutoModelForCausalLM

    dtype = _DTYPES[cfg.dtype]
    if cfg.init == "pretrained":
        model = AutoModelForCausalLM.from_pretrained(
            cfg.path, dtype=dtype, attn_implementation=cfg.attn_implementation, local_files_only=True
        )
    else:
        tokenizer = tokenizer if tokenizer is not None else build_builtin_tokenizer()
        config = random_model_config(cfg, len(tokenizer), tokenizer.pad_token_id)
        config._attn_implementation = cfg.attn_implementation
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    if cfg.gradient_checkpointing:
        model.gradient_checkpointing_enable()
    model.generation_config.pad_token_id = tokenizer.pad_token_id if tokenizer is not None else None
    return model


def num_parameters(model: torch.nn.Module) -> int:
    """Parameters of ``model`` (tied embeddings counted once)."""
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())
