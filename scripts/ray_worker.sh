#!/usr/bin/env bash
# Join a worker node to the swebox Ray cluster whose head scripts/ray_head.sh started, with the same custom
# resources (swebox_node = 1 so rollout actors run here; swebox_io_mb = this node's I/O budget in MB).
#
#   scripts/ray_worker.sh HEAD_ADDR:PORT [--ip ADDR] [--num-cpus N] [--num-gpus N] [--io-budget-mb N]
#                         [--node-resource NAME] [--temp-dir DIR] [--no-auth] [--block] [--dry-run] [-- RAY_ARGS]
#
# --ip is this node's address as the head reaches it. Every node keeps its own layer cache; its unpacking is
# bounded by its own swebox_io_mb. --block keeps `ray start` in the foreground; --dry-run prints the command;
# anything after `--` goes to `ray start`. Token authentication (RAY_AUTH_MODE=token) needs the head's token here:
# ~/.ray/auth_token (copied from the head) or RAY_AUTH_TOKEN; --no-auth for a head started with --no-auth.
#
# Loopback (the default --ip 127.0.0.1, with a head on 127.0.0.1: a second node on the same machine, for trying
# a two-node launch): Ray's CLI joins a node only with RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=1, which makes the
# node listen on every interface; so on loopback this script starts the node the way ray.cluster_utils.Cluster
# does, with that variable at 0, everything bound to 127.0.0.1, in the foreground until SIGTERM or Ctrl-C.
set -euo pipefail

script=ray_worker.sh
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=scripts/ray_common.sh
. "$here/ray_common.sh"
usage() { sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; }

[ "$#" -ge 1 ] || die "expects the head's address HOST:PORT first (printed by scripts/ray_head.sh); see --help"
case "$1" in
  -h|--help) usage; exit 0 ;;
  *:*) head="$1"; shift ;;
  *) die "expects the head's address as HOST:PORT first; found '$1'" ;;
esac
while [ "$#" -gt 0 ]; do
  common_option "$@"
  if [ "$taken" -gt 0 ]; then shift "$taken"; continue; fi
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --) shift; extra=("$@"); break ;;
    *) die "unknown option '$1'; see --help" ;;
  esac
done
finish_common

if [ "$auth" = token ] && [ -z "${RAY_AUTH_TOKEN:-}" ] && [ ! -s "$token_file" ] && ! $dry_run; then
  die "token authentication: expected the head's token in $token_file or RAY_AUTH_TOKEN; found neither; copy \
~/.ray/auth_token from the head node (or start both with --no-auth)"
fi

is_loopback() { case "$1" in 127.*|localhost) return 0 ;; *) return 1 ;; esac; }
loopback=false
if is_loopback "$ip" && is_loopback "${head%:*}"; then
  loopback=true
elif is_loopback "$ip" || is_loopback "${head%:*}"; then
  die "this node's --ip '$ip' and the head '$head' must both be loopback (one machine) or both cluster addresses"
fi
resources="{\"$node_resource\": 1, \"swebox_io_mb\": $budget_mb}"

if $loopback; then
  python_bin="$(dirname "$ray_bin")/python"
  [ -x "$python_bin" ] || python_bin="$(command -v python3)"
  [ "${#extra[@]}" -eq 0 ] || die "arguments after -- are for 'ray start', which a loopback node does not use"
  if $dry_run; then
    echo "loopback node: RAY_AUTH_MODE=$RAY_AUTH_MODE $python_bin - (ray._private.node.Node) gcs=$head ip=$ip" \
         "resources=$resources" \
         "num_cpus=${num_cpus:-all} num_gpus=${num_gpus:-0} temp_dir=${temp_dir:-default}"
    exit 0
  fi
  echo "swebox Ray worker (loopback) joining $head (resources $node_resource=1, swebox_io_mb=$budget_mb)"
  export RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 SWEBOX_HEAD="$head" SWEBOX_IP="$ip" SWEBOX_RESOURCES="$resources" \
         SWEBOX_NUM_CPUS="$num_cpus" SWEBOX_NUM_GPUS="$num_gpus" SWEBOX_TEMP_DIR="$temp_dir"
  exec "$python_bin" - <<'PY'
import json, os, signal, threading
from ray._private.node import Node
from ray._private.parameter import RayParams

env = os.environ
params = RayParams(
    gcs_address=env["SWEBOX_HEAD"], node_ip_address=env["SWEBOX_IP"], resources=json.loads(env["SWEBOX_RESOURCES"]),
    num_cpus=int(env["SWEBOX_NUM_CPUS"]) if env["SWEBOX_NUM_CPUS"] else None,
    num_gpus=int(env["SWEBOX_NUM_GPUS"]) if env["SWEBOX_NUM_GPUS"] else 0,
    temp_dir=env["SWEBOX_TEMP_DIR"] or None, include_log_monitor=False, node_manager_port=0,
    min_worker_port=0, max_worker_port=0,
)
params.dashboard_agent_listen_port = None  # a free port, not the head's
node = Node(params, head=False, shutdown_at_exit=True, spawn_reaper=True)
print(f"node {node.unique_id} up; stop it with SIGTERM or Ctrl-C", flush=True)
stop = threading.Event()
for sig in (signal.SIGTERM, signal.SIGINT):
    signal.signal(sig, lambda *_: stop.set())
stop.wait()
node.kill_all_processes(check_alive=False, allow_graceful=True)
PY
fi

export RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=1  # Ray's CLI refuses to join a node without it
cmd=("$ray_bin" start --address="$head" --node-ip-address="$ip" --resources="$resources")
[ -n "$num_cpus" ] && cmd+=(--num-cpus="$num_cpus")
[ -n "$num_gpus" ] && cmd+=(--num-gpus="$num_gpus")
[ -n "$temp_dir" ] && cmd+=(--temp-dir="$temp_dir")
$block && cmd+=(--block)
cmd+=("${extra[@]}")

if $dry_run; then
  printf '%q ' env "RAY_AUTH_MODE=$RAY_AUTH_MODE" "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=1" "${cmd[@]}"; echo
  exit 0
fi
echo "swebox Ray worker ($ip) joining $head (resources $node_resource=1, swebox_io_mb=$budget_mb)"
exec "${cmd[@]}"
