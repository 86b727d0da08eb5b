"""What the gateway tests share: a ``bash`` tool, a chat, and the clients that talk to a gateway from inside a
sandbox (:data:`POST`, their request function; :data:`CLIENT`, an OpenAI function-calling agent's loop).
tests/envs/gateway/tiny_agent.py keeps its own copy of the tool: it is a program run in the sandbox, not a
module of the suite."""

from __future__ import annotations

import json
from typing import Any

from swebox.envs.gateway import Gateway
from swebox.envs.sandbox import Sandbox

BASH = {
    "type": "function",
    "function": {
        "name": "bash",
        "description": "Run a shell command in the repository.",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
    },
}
CHAT = [{"role": "system", "content": "You fix bugs."}, {"role": "user", "content": "add(2, 3) returns -1."}]

# A client script's start: ``post(body)`` sends one chat completions request to the gateway at {url} and gives
# (status, body text), an HTTP error included. Scripts append their own lines and close with EOF.
POST = """python3 - <<'EOF'
import json, urllib.request, urllib.error
def post(body):
    r = urllib.request.Request('{url}/chat/completions', data=json.dumps(body).encode(),
                               headers={{'Content-Type': 'application/json'}})
    try:
        with urllib.request.urlopen(r, timeout=120) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
"""

# The agent's loop: posts up to {calls} requests in turn, each with {fields}; after a reply with tool calls it
# sends the assistant message back as received and one tool message per call; prints [[status, body], ...].
CLIENT = (
    POST
    + """messages, out = {chat!r}, []
for _ in range({calls}):
    status, answer = post(dict({fields!r}, messages=messages))
    out.append([status, answer])
    if status != 200:
        break
    message = json.loads(answer)['choices'][0]['message']
    messages = messages + [message]
    for call in message.get('tool_calls') or []:
        result = 'ran ' + call['function']['arguments']
        messages.append({{'role': 'tool', 'tool_call_id': call['id'], 'content': result}})
print(json.dumps(out))
EOF"""
)


def talk(sandbox: Sandbox, gateway: Gateway, fields: dict[str, Any], calls: int) -> list[tuple[int, str]]:
    """``gateway`` served inside ``sandbox``, the client's (status, body) per request it sent."""
    url = gateway.serve_inside(sandbox.pid)
    result = sandbox.exec(CLIENT.format(url=url, chat=CHAT, calls=calls, fields=fields), timeout=300)
    assert result.exit_code == 0, result.output
    return [tuple(pair) for pair in json.loads(result.output.strip().splitlines()[-1])]
