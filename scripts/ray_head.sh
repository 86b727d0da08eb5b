#!/usr/bin/env bash
# Start the head node of a Ray cluster for swebox training, with the custom resources the trainer expects:
#   swebox_node   = 1            rollout actors run only on nodes advertising it (ray.node_resource)
#   swebox_io_mb  = BUDGET       MB of layer archives that may unpack at once on this node (the I/O budget)
#
#   scripts/ray_head.sh [--ip ADDR] [--port N] [--num-cpus N] [--num-gpus N] [--io-budget-mb N]
#                       [--node-resource NAME] [--temp-dir DIR] [--dashboard] [--no-auth] [--block] [--dry-run]
#                       [-- RAY_ARGS]
#
# Defaults are loopback-safe: without --ip the head binds 127.0.0.1 only (RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0),
# so nothing listens on the network; give the machine's cluster address (--ip 10.0.0.1) for a real cluster.
# Then start workers with scripts/ray_worker.sh ADDR:PORT and train with ray.address=ADDR:PORT.
# --block keeps `ray start` in the foreground (Ctrl-C or SIGTERM stops the node); --dry-run prints the command.
# Anything after `--` goes to `ray start` unchanged. RAY=/path/to/ray picks the ray executable.
# Token authentication is on (RAY_AUTH_MODE=token; a token is generated in ~/.ray/auth_token when there is none):
# copy that file to every other node, and the trainer finds it there (or set RAY_AUTH_TOKEN); --no-auth turns it off.
set -euo pipefail

ip="${SWEBOX_RAY_IP:-127.0.0.1}"
port=6379
num_cpus=""
num_gpus=""
budget_mb=2000
node_resource=swebox_node
temp_dir=""
dashboard=false
auth="${RAY_AUTH_MODE:-token}"
block=false
dry_run=false
extra=()

usage() { sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; }
die() { echo "ray_head.sh: $*" >&2; exit 2; }
need_value() { [ "$#" -ge 2 ] && [ -n "$2" ] || die "$1 expects a value; see --help"; }
is_count() { [[ "$2" =~ ^[0-9]+$ ]] || die "$1 expects a whole number; found '$2'"; }

while [ "$#" -gt 0 ]; do
  case "$1" in
    --ip) need_value "$@"; ip="$2"; shift 2 ;;
    --port) need_value "$@"; is_count "$1" "$2"; port="$2"; shift 2 ;;
    --num-cpus) need_value "$@"; is_count "$1" "$2"; num_cpus="$2"; shift 2 ;;
    --num-gpus) need_value "$@"; is_count "$1" "$2"; num_gpus="$2"; shift 2 ;;
    --io-budget-mb) need_value "$@"; is_count "$1" "$2"; budget_mb="$2"; shift 2 ;;
    --node-resource) need_value "$@"; node_resource="$2"; shift 2 ;;
    --temp-dir) need_value "$@"; temp_dir="$2"; shift 2 ;;
    --dashboard) dashboard=true; shift ;;
    --no-auth) auth=disabled; shift ;;
    --block) block=true; shift ;;
    --dry-run) dry_run=true; shift ;;
    -h|--help) usage; exit 0 ;;
    --) shift; extra=("$@"); break ;;
    *) die "unknown option '$1'; see --help" ;;
  esac
done
[ "$budget_mb" -gt 0 ] || die "--io-budget-mb expects a positive number of MB; found '$budget_mb'"

# the ray executable: $RAY, the one beside this venv's python, or PATH
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ray_bin="${RAY:-}"
for candidate in "$here/../.venv/bin/ray" "$(command -v ray || true)"; do
  [ -n "$ray_bin" ] && break
  [ -n "$candidate" ] && [ -x "$candidate" ] && ray_bin="$candidate"
done
[ -n "$ray_bin" ] || die "no 'ray' executable found; install swebox[train] (pip install 'swebox[train]') or set RAY=/path/to/ray"

# Measured with Ray 2.60: with the variable at 0 every listening socket is on 127.0.0.1; at 1 (Ray's default on
# Linux, needed by nodes that join with `ray start`) several listen on all interfaces.
case "$ip" in
  127.*|localhost) export RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 ;;
  *) export RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=1 ;;
esac

export RAY_AUTH_MODE="$auth"
token_file="${RAY_AUTH_TOKEN_PATH:-$HOME/.ray/auth_token}"

cmd=("$ray_bin" start --head --node-ip-address="$ip" --port="$port"
     --resources="{\"$node_resource\": 1, \"swebox_io_mb\": $budget_mb}" --include-dashboard="$dashboard")
[ -n "$num_cpus" ] && cmd+=(--num-cpus="$num_cpus")
[ -n "$num_gpus" ] && cmd+=(--num-gpus="$num_gpus")
[ -n "$temp_dir" ] && cmd+=(--temp-dir="$temp_dir")
$block && cmd+=(--block)
cmd+=("${extra[@]}")

if $dry_run; then
  printf '%q ' env "RAY_AUTH_MODE=$RAY_AUTH_MODE" "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=$RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER" \
    "${cmd[@]}"; echo
  exit 0
fi
if [ "$auth" = token ] && [ -z "${RAY_AUTH_TOKEN:-}" ] && [ ! -s "$token_file" ]; then
  [ -z "${RAY_AUTH_TOKEN_PATH:-}" ] || die "token authentication: expected a token in RAY_AUTH_TOKEN_PATH=\
$RAY_AUTH_TOKEN_PATH; found none; unset it to have one generated in ~/.ray/auth_token"
  "$ray_bin" get-auth-token --generate >/dev/null
fi
echo "swebox Ray head: $ip:$port (resources $node_resource=1, swebox_io_mb=$budget_mb)"
if [ "$auth" = token ] && [ -n "${RAY_AUTH_TOKEN:-}" ]; then
  echo "  token auth:     give every node and the trainer the same RAY_AUTH_TOKEN"
elif [ "$auth" = token ]; then
  echo "  token auth:     copy $token_file to the same path on every other node"
fi
echo "  join a worker:  scripts/ray_worker.sh $ip:$port"
echo "  train on it:    swebox train --config CONFIG ray.address=$ip:$port"
exec "${cmd[@]}"
