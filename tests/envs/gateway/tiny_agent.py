"""A minimal agent program for harness tests: mini-swe-agent's text protocol (one ``mswea_bash_command`` block
per reply, ``echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`` submits) in the standard library only, so that it runs
with whatever python3 the sandbox has. Exits 3 when the gateway refuses a call."""

import json
import os
import re
import subprocess
import sys
import urllib.error
import urllib.request

BASE = os.environ["OPENAI_BASE_URL"]
ACTION = re.compile(r"```mswea_bash_command\s*\n(.*?)\n```", re.S)

with open(os.environ["SWEBOX_TASK_FILE"]) as task:
    messages = [
        {"role": "system", "content": "Reply with exactly one ```mswea_bash_command block."},
        {"role": "user", "content": task.read()},
    ]
for _ in range(int(os.environ.get("TINY_AGENT_STEPS", "10"))):
    body = json.dumps({"model": "policy", "messages": messages}).encode()
    request = urllib.request.Request(
        BASE + "/chat/completions", data=body, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=300) as response:
            reply = json.load(response)["choices"][0]["message"]["content"]
    except urllib.error.HTTPError as exc:
        print("gateway refused:", exc.code, exc.read().decode())
        sys.exit(3)
    messages.append({"role": "assistant", "content": reply})
    found = ACTION.search(reply)
    if not found:
        messages.append({"role": "user", "content": "Format error: one mswea_bash_command block, please."})
        continue
    if "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT" in found.group(1):
        break
    done = subprocess.run(found.group(1), shell=True, capture_output=True, text=True)
    result = f"<returncode>{done.returncode}</returncode>\n{done.stdout}{done.stderr}"
    messages.append({"role": "user", "content": result})
