"""The model gateway's overhead per call (`swebox bench gateway`): what a harness's model call costs beyond the
model itself.

One sandbox (no layers but the host's system), one gateway served in its network namespace, a model that answers
at once with a fixed reply and ids; a client in the sandbox (Python's urllib, a new connection per call, as
OpenAI clients without keep-alive do) makes ``--calls`` chat completion calls with a prompt of ``--prompt-chars``
characters. Each call's round trip is timed inside the sandbox; the table gives the median and the 90th
percentile in milliseconds, with the load average before and after. Everything measured is overhead: HTTP and
JSON both ways, the namespace's loopback, the gateway's checks and its record of the call.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile

from swebox.envs.gateway import Completion, Gateway, GatewayLimits
from swebox.envs.sandbox import Sandbox, SandboxPolicy

CLIENT = """python3 - <<'EOF'
import json, time, urllib.request
body = json.dumps({{'model': 'm', 'messages': [{{'role': 'user', 'content': 'x' * {chars}}}]}}).encode()
headers = {{'Content-Type': 'application/json'}}
times = []
for _ in range({calls}):
    t0 = time.perf_counter()
    request = urllib.request.Request('{url}/chat/completions', data=body, headers=headers)
    with urllib.request.urlopen(request, timeout=30) as response:
        json.load(response)
    times.append(time.perf_counter() - t0)
print(json.dumps(times))
EOF"""


class Instant:
    """Answers every call at once: a 40-token reply."""

    def complete(self, messages, max_tokens, seed, request):
        return Completion(
            text="```bash\nls\n```", prompt_ids=list(range(100)), token_ids=list(range(40)), logprobs=[-0.1] * 40
        )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--calls", type=int, default=300, help="calls to time (default 300)")
    parser.add_argument(
        "--prompt-chars",
        type=int,
        default=20_000,
        help="characters of each call's prompt (default 20000: a mid-episode conversation)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.calls < 1 or args.prompt_chars < 1:
        raise SystemExit(
            f"swebox bench gateway: expected --calls >= 1 and --prompt-chars >= 1, found "
            f"{args.calls} and {args.prompt_chars}"
        )
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="swebox-bench-gateway-", dir="/tmp") as root:
        os.chmod(root, 0o711)
        layer = os.path.join(root, "layer")
        os.mkdir(layer, 0o755)
        policy = SandboxPolicy(work_root=os.path.join(root, "work"), command_timeout_s=600)
        os.mkdir(policy.work_root, 0o711)
        with (
            Sandbox([layer], policy) as sandbox,
            Gateway(Instant(), GatewayLimits(max_calls=args.calls, max_tokens=40 * args.calls)) as gateway,
        ):
            url = gateway.serve_inside(sandbox.pid)
            result = sandbox.exec(CLIENT.format(url=url, calls=args.calls, chars=args.prompt_chars), timeout=600)
            if result.exit_code != 0:
                raise SystemExit(f"swebox bench gateway: the client failed: {result.output[-2000:]}")
            times = json.loads(result.output.strip().splitlines()[-1])
    ms = sorted(t * 1000 for t in times)
    p90 = ms[min(len(ms) - 1, int(0.9 * len(ms)))]
    print("| calls | prompt chars | median ms/call | p90 ms/call | load before | load after |")
    print("|---|---|---|---|---|---|")
    print(
        f"| {len(ms)} | {args.prompt_chars} | {statistics.median(ms):.2f} | {p90:.2f} | "
        f"{load_before[0]:.1f} | {os.getloadavg()[0]:.1f} |"
    )
    return 0
