# Sourced by the experiment scripts: one sweep in the simulator, or the same sweep against real
# engines started here (`switchyard serve`, engines with role "any", the router switching policy
# per run through PUT /admin/policy, exactly as `bench serve --policies` does).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
SY="$ROOT/.venv/bin/switchyard"
OUT=${OUT:-$ROOT/bench_results/experiments}
PORT=${PORT:-18123}
mkdir -p "$OUT"

# simulate NAME ARGS...: `switchyard bench simulate` into $OUT/NAME (summary.json, JSONL, plots).
simulate() {
  local name=$1
  shift
  "$SY" bench simulate --plot --no-progress --result-dir "$OUT/$name" "$@"
}

# start_serve LOG ENGINES [SERVE ARGS...]: `switchyard serve` in the background (serve_pid),
# stopped on exit, Ctrl-C or failure; returns once it serves (its output in LOG).
start_serve() {
  local log=$1 engines=$2
  shift 2
  "$SY" serve --engines "$engines" --policy round_robin --port "$PORT" "$@" >"$log" 2>&1 &
  serve_pid=$!
  trap 'kill -INT '"$serve_pid"' 2>/dev/null || true; wait '"$serve_pid"' 2>/dev/null || true' \
    EXIT
  for _ in $(seq 600); do
    grep -q "switchyard serving on" "$log" && return 0
    kill -0 "$serve_pid" 2>/dev/null || { cat "$log" >&2; return 1; }
    sleep 1
  done
}

# stop_serve: the server start_serve started, stopped.
stop_serve() {
  kill -INT "$serve_pid"
  wait "$serve_pid" || true
  trap - EXIT
}

# real NAME ENGINES ARGS...: start ENGINES real engines and a router, run `switchyard bench
# serve` with ARGS into $OUT/NAME, stop everything (also on Ctrl-C or failure).
real() {
  local name=$1 engines=$2
  shift 2
  mkdir -p "$OUT/$name"
  start_serve "$OUT/$name/serve.log" "$engines"
  "$SY" bench serve --url "http://127.0.0.1:$PORT" --plot --no-progress \
    --result-dir "$OUT/$name" "$@"
  stop_serve
}

# mode [sim|real]: the first argument of every experiment script.
mode() {
  case "${1:-sim}" in
    sim | real) echo "${1:-sim}" ;;
    *) echo "usage: $0 [sim|real]" >&2; exit 2 ;;
  esac
}
