# Sourced by scripts/ray_head.sh and scripts/ray_worker.sh (not run on its own): the options both take, their
# checks, and where the ray executable is. The sourcing script sets `script` (its name, for messages) first.

ip="${SWEBOX_RAY_IP:-127.0.0.1}"
num_cpus=""
num_gpus=""
budget_mb=2000
node_resource=swebox_node
temp_dir=""
auth="${RAY_AUTH_MODE:-token}"
block=false
dry_run=false
extra=()

die() { echo "$script: $*" >&2; exit 2; }
need_value() { [ "$#" -ge 2 ] && [ -n "$2" ] || die "$1 expects a value; see --help"; }
is_count() { [[ "$2" =~ ^[0-9]+$ ]] || die "$1 expects a whole number; found '$2'"; }

# common_option ARGS...: takes the option at $1 when it is one both scripts have, and sets `taken` to the number
# of words it used (0: not a common option, the caller's own case decides).
common_option() {
  taken=2
  case "$1" in
    --ip) need_value "$@"; ip="$2" ;;
    --num-cpus) need_value "$@"; is_count "$1" "$2"; num_cpus="$2" ;;
    --num-gpus) need_value "$@"; is_count "$1" "$2"; num_gpus="$2" ;;
    --io-budget-mb) need_value "$@"; is_count "$1" "$2"; budget_mb="$2" ;;
    --node-resource) need_value "$@"; node_resource="$2" ;;
    --temp-dir) need_value "$@"; temp_dir="$2" ;;
    --no-auth) auth=disabled; taken=1 ;;
    --block) block=true; taken=1 ;;
    --dry-run) dry_run=true; taken=1 ;;
    *) taken=0 ;;
  esac
}

# after parsing: the budget check and the ray executable ($RAY, the one beside this checkout's venv, or PATH)
finish_common() {
  [ "$budget_mb" -gt 0 ] || die "--io-budget-mb expects a positive number of MB; found '$budget_mb'"
  ray_bin="${RAY:-}"
  for candidate in "$here/../.venv/bin/ray" "$(command -v ray || true)"; do
    [ -n "$ray_bin" ] && break
    [ -n "$candidate" ] && [ -x "$candidate" ] && ray_bin="$candidate"
  done
  [ -n "$ray_bin" ] || die "no 'ray' executable found; install swebox[train] (pip install 'swebox[train]') or \
set RAY=/path/to/ray"
  export RAY_AUTH_MODE="$auth"
  token_file="${RAY_AUTH_TOKEN_PATH:-$HOME/.ray/auth_token}"
}
