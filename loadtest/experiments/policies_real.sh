#!/usr/bin/env bash
# The tournament's claims checked on real engines (issue 21, item 5): ENGINES SmolLM2 engines on
# this machine (`switchyard serve`, each engine pinned to its own cores by --cpu-affinity auto),
# each workload x rate, the policies interleaved REPS times (A B C A B C ...) on the same prompts
# and arrivals within a repetition (one salt per repetition), so the spread between repetitions
# is the machine's and the prompts', not the order's. Follow docs/benchmarking.md "Quiet runs":
# load average below 1 before starting, nothing else running.
#   loadtest/experiments/policies_real.sh                       # 2 engines, ~25 minutes here
#   ENGINES=3 RATES_AZURE=1,4 loadtest/experiments/policies_real.sh
#   python loadtest/experiments/real_spread.py bench_results/experiments/policies-real-2
source "$(dirname "$0")/common.sh"
ENGINES=${ENGINES:-2}
REPS=${REPS:-3}
POLICIES=${POLICIES:-least_load,slo_mux,adaptive}
NUM_PROMPTS=${NUM_PROMPTS:-40}
RATES_AZURE=${RATES_AZURE:-2,6}
RATES_SONNET=${RATES_SONNET:-4,12}
SLO=(--slo-ttft-ms 2000 --slo-tpot-ms 200)  # the tournament's local-profile SLO
NAME="policies-real-$ENGINES"
DIR="$OUT/$NAME"
mkdir -p "$DIR"
"$SY" serve --engines "$ENGINES" --policy round_robin --port "$PORT" --cpu-affinity auto \
  >"$DIR/serve.log" 2>&1 &
serve_pid=$!
trap 'kill -INT '"$serve_pid"' 2>/dev/null || true; wait '"$serve_pid"' 2>/dev/null || true' EXIT
for _ in $(seq 600); do
  grep -q "switchyard serving on" "$DIR/serve.log" && break
  kill -0 "$serve_pid" 2>/dev/null || { cat "$DIR/serve.log" >&2; exit 1; }
  sleep 1
done
url="http://127.0.0.1:$PORT"
uptime | tee "$DIR/uptime.txt"
# workload name -> its arguments (the tournament's local sizes: docs/experiments.md)
declare -A WORKLOAD=(
  [azure]="--workload azure-code --length-scale 0.1"
  [sonnet]="--workload sonnet --input-mean 55 --input-std 15 --output-mean 15 --output-std 8"
)
declare -A RATES=([azure]=$RATES_AZURE [sonnet]=$RATES_SONNET)
for workload in azure sonnet; do
  IFS=, read -r -a rates <<<"${RATES[$workload]}"
  for rate in "${rates[@]}"; do
    for rep in $(seq "$REPS"); do
      IFS=, read -r -a policies <<<"$POLICIES"
      for policy in "${policies[@]}"; do
        # shellcheck disable=SC2086  # the workload's arguments are words
        "$SY" bench serve --url "$url" --no-progress --policies "$policy" \
          --salt $((rep * 1000)) --rates "$rate" --num-prompts "$NUM_PROMPTS" "${SLO[@]}" \
          ${WORKLOAD[$workload]} --result-dir "$DIR/$workload-$rate-rep$rep-$policy" \
          >"$DIR/$workload-$rate-rep$rep-$policy.log"
        echo "$workload @$rate rep $rep $policy: $(grep 'SLO attainment' \
          "$DIR/$workload-$rate-rep$rep-$policy.log" | awk '{print $NF}')% ($(uptime | sed 's/.*load/load/'))"
      done
    done
  done
done
uptime | tee -a "$DIR/uptime.txt"
"$ROOT/.venv/bin/python" "$ROOT/loadtest/experiments/real_spread.py" "$DIR"
