#!/usr/bin/env bash
# The tournament's claims checked on real engines (issue 21, item 5): ENGINES SmolLM2 engines on
# this machine (`switchyard serve`, each engine pinned to its own cores by --cpu-affinity auto),
# each workload x rate, the policies interleaved REPS times (A B C A B C ...) on the same request
# shapes and arrivals within a repetition, so the spread between repetitions is the machine's and
# the prompts', not the order's (the order also rotates, and each repetition first runs its
# shapes once at its rate to warm the engines up, discarded). Every run has its own salt, so its
# prompts' contents are its own: a prompt an earlier run left in an engine's prefix cache would
# favour the policy that places it on the same engine again (on sonnet, 66-83% of round_robin's
# prompt tokens were found cached that way, its fresh cursor repeating the warm-up's placement;
# with a salt per run every data-parallel policy finds 25-30%, the prompts' shared prefix).
# Follow docs/benchmarking.md "Quiet runs": load average below 1 before starting, nothing else
# running.
#   loadtest/experiments/policies_real.sh                       # 2 engines, ~10 minutes here
#   ENGINES=3 RATES_AZURE=20,40 loadtest/experiments/policies_real.sh
#   POLICIES=slo_mux,adaptive,my_variant SERVE_ARGS="--policy-file my_variants.py" \
#     loadtest/experiments/policies_real.sh     # a policy file's policies beside the built-ins
#   WORKLOADS=sonnet NUM_PROMPTS=600 RATES_SONNET=40,50 loadtest/experiments/policies_real.sh
#                                               # one workload, sustained past capacity
#   python loadtest/experiments/real_spread.py bench_results/experiments/policies-real-2
source "$(dirname "$0")/common.sh"
ENGINES=${ENGINES:-2}
REPS=${REPS:-3}
POLICIES=${POLICIES:-least_load,slo_mux,adaptive}
NUM_PROMPTS=${NUM_PROMPTS:-120}
WORKLOADS=${WORKLOADS:-azure,sonnet}
RATES_AZURE=${RATES_AZURE:-40,80}
RATES_SONNET=${RATES_SONNET:-200,400}
SLO=(--slo-ttft-ms 2000 --slo-tpot-ms 200)  # the tournament's local-profile SLO
NAME="policies-real-$ENGINES"
DIR="$OUT/$NAME"
mkdir -p "$DIR"
# shellcheck disable=SC2086  # SERVE_ARGS are words
start_serve "$DIR/serve.log" "$ENGINES" --cpu-affinity auto ${SERVE_ARGS:-}
url="http://127.0.0.1:$PORT"
# workload name -> its arguments (the tournament's local sizes: docs/experiments.md)
declare -A WORKLOAD=(
  [azure]="--workload azure-code --length-scale 0.1"
  [sonnet]="--workload sonnet --input-mean 55 --input-std 15 --output-mean 15 --output-std 8"
)
declare -A RATES=([azure]=$RATES_AZURE [sonnet]=$RATES_SONNET)
uptime | tee "$DIR/uptime.txt"
IFS=, read -r -a workloads <<<"$WORKLOADS"
for workload in "${workloads[@]}"; do
  IFS=, read -r -a rates <<<"${RATES[$workload]}"
  for rate in "${rates[@]}"; do
    for rep in $(seq "$REPS"); do
      # Warm-up, discarded: these shapes at this rate once (salt rep*1000; the runs take
      # rep*1000 + 1 + the policy's index). An engine's first steps of batch shapes it has not
      # run yet are several times slower (seen here: 10% attainment for the first policy of a
      # repetition, 100% for the next).
      # shellcheck disable=SC2086
      "$SY" bench serve --url "$url" --no-progress --policies round_robin \
        --salt $((rep * 1000)) --rates "$rate" --num-prompts "$NUM_PROMPTS" \
        ${WORKLOAD[$workload]} --result-dir "$DIR/warmup-$workload-$rate-$rep" \
        >"$DIR/warmup-$workload-$rate-$rep.log"
      # The order rotates with the repetition (A B C, B C A, C A B): no policy always runs
      # first or last.
      IFS=, read -r -a policies <<<"$POLICIES"
      n=${#policies[@]}
      for k in $(seq 0 $((n - 1))); do
        i=$(((k + rep - 1) % n))
        policy=${policies[$i]}
        # shellcheck disable=SC2086  # the workload's arguments are words
        "$SY" bench serve --url "$url" --no-progress --policies "$policy" \
          --salt $((rep * 1000 + i + 1)) --rates "$rate" --num-prompts "$NUM_PROMPTS" "${SLO[@]}" \
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
