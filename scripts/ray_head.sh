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

script=ray_head.sh
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=scripts/ray_common.sh
. "$here/ray_common.sh"
port=6379
dashboard=false
usage() { sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; }

while [ "$#" -gt 0 ]; do
  common_option "$@"
  if [ "$taken" -gt 0 ]; then shift "$taken"; continue; fi
  case "$1" in
    --port) need_value "$@"; is_count "$1" "$2"; port="$2"; shift 2 ;;
    --dashboard) dashboard=true; shift ;;
    -h|--help) usage; exit 0 ;;
    --) shift; extra=("$@"); break ;;
    *) die "unknown option '$1'; see --help" ;;
  esac
done
finish_common

# Measured with Ray 2.60: with the variable at 0 every listening socket is on 127.0.0.1; at 1 (Ray's default on
# Linux, needed by nodes that join with `ray start`) several listen on all interfaces.
case "$ip" in
  127.*|localhost) export RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 ;;
  *) export RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=1 ;;
esac

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
