"""A minimal agent program for harness tests: mini-swe-agent's text protocol (one ``mswea_bash_command`` block
per reply, ``echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`` submits) in the standard library only, so that it runs
with whatever python3 the sandbox has. Exits 3 when the gateway refuses a call.

With ``TINY_AGENT_TOOLS=1`` it speaks OpenAI tool calls instead: it offers one ``bash`` tool, runs each tool call
of a reply and sends its result back as a ``tool`` message; a reply without tool calls (or a call of the submit
command) ends the run. ``TINY_AGENT_MAX_TOKENS`` sets every request's ``max_tokens``."""

import json
import os
import re
import subprocess
import sys
import urllib.error
import urllib.request

BASE = os.environ["OPENAI_BASE_URL"]
ACTION = re.compile(r"```mswea_bash_command\s*\n(.*?)\n```", re.S)
TOOLS = os.environ.get("TINY_AGENT_TOOLS") == "1"
BASH = {
    "type": "function",
    "function": {
        "name": "bash",
        "description": "Run a shell command in the repository.",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
    },
}
SUBMIT = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"


def run(command):
    done = subprocess.run(command, shell=True, capture_output=True, text=True)
    return f"<returncode>{done.returncode}</returncode>\n{done.stdout}{done.stderr}"


with open(os.environ["SWEBOX_TASK_FILE"]) as task:
    messages = [
        {"role": "system", "content": "Reply with exactly one ```mswea_bash_command block."},
        {"role": "user", "content": task.read()},
    ]
for _ in range(int(os.environ.get("TINY_AGENT_STEPS", "10"))):
    ask = {"model": "policy", "messages": messages}
    if TOOLS:
        ask["tools"] = [BASH]
    if os.environ.get("TINY_AGENT_MAX_TOKENS"):
        ask["max_tokens"] = int(os.environ["TINY_AGENT_MAX_TOKENS"])
    body = json.dumps(ask).encode()
    request = urllib.request.Request(
        BASE + "/chat/completions", data=body, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=300) as response:
            message = json.load(response)["choices"][0]["message"]
    except urllib.error.HTTPError as exc:
        print("gateway refused:", exc.code, exc.read().decode())
        sys.exit(3)
    reply = message.get("content") or ""
    if TOOLS:
        calls = message.get("tool_calls") or []
        messages.append({"role": "assistant", "content": message.get("content"), "tool_calls": calls})
        if not calls:
            break
        submitted = False
        for call in calls:
            command = json.loads(call["function"]["arguments"])["command"]
            submitted = submitted or SUBMIT in command
            result = "submitted" if SUBMIT in command else run(command)
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})
        if submitted:
            break
        continue
    messages.append({"role": "assistant", "content": reply})
    found = ACTION.search(reply)
    if not found:
        messages.append({"role": "user", "content": "Format error: one mswea_bash_command block, please."})
        continue
    if SUBMIT in found.group(1):
        break
    messages.append({"role": "user", "content": run(found.group(1))})
