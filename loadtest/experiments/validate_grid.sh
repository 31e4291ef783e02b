#!/usr/bin/env bash
# The simulator against real engines on every built-in policy (issue 20, item 4): sonnet,
# mooncake and azure-code at three loads — about 30% of capacity, at capacity, 1.5x overload,
# capacity found by the simulator itself (sim_capacity.py: the tournament's definition) on the
# profile the engines fitted — REPS interleaved repetitions on 2 real SmolLM2 engines, then the
# same runs (same prompts, same arrivals) in the simulator; validate_table.py prints the table
# (mean JCT, P90 TTFT, SLO attainment; the ranking's Kendall tau per workload x load).
#  1. `switchyard serve` with 2 engines pinned to their own cores (--cpu-affinity auto);
#  2. calibration: each workload once at a moderate rate, so the engines fit their step model;
#  3. the profile: both engines' fitted models averaged, frozen (build_local --from-engine x2);
#  4. each workload's capacity in the simulator on that profile;
#  5. per workload x load: a warm-up run (discarded: an engine's first steps of a batch shape it
#     has not run are several times slower); per repetition every policy, the order
#     rotating with the repetition; policy k of POLICIES uses salt REP*1000+k, as
#     `bench simulate --policies POLICIES --salt REP*1000` numbers its runs;
#  6. the simulator: the same runs.
# Follow docs/benchmarking.md "Quiet runs": load average below 1 before starting, nothing else
# running (the script records `uptime` before every real run in uptime.txt).
# PHASE=real runs steps 1-5 only, PHASE=sim step 6 only (for the real runs present in the result
# directory: a real phase cut short still gets its table), PHASE=all (default) both;
# PHASE=resume runs step 5 again on new, calibrated engines with the profile and capacities
# already in the result directory (a grid measured in several sittings, e.g. one workload later).
#   loadtest/experiments/validate_grid.sh                  # ~1 hour here
#   WORKLOADS=sonnet LOADS=0.3 REPS=1 POLICIES=round_robin,pd NUM_PROMPTS=10 \
#     loadtest/experiments/validate_grid.sh                # smoke, a few minutes
source "$(dirname "$0")/common.sh"
POLICIES=${POLICIES:-round_robin,least_load,cache_aware,pd,balanced_pd,tandem,slo_mux,adaptive}
WORKLOADS=${WORKLOADS:-sonnet,azure,mooncake}
LOADS=${LOADS:-0.3,1,1.5}
REPS=${REPS:-3}
NUM_PROMPTS=${NUM_PROMPTS:-}  # requests per run; default per workload (PROMPTS below)
SLO=(--slo-ttft-ms 2000 --slo-tpot-ms 200)  # the tournament's local-profile SLO
PY="$ROOT/.venv/bin/python"
DIR="$OUT/validate-grid"
mkdir -p "$DIR/real" "$DIR/sim"
# Sonnet at the tournament's local size (docs/experiments.md); the traces smaller than there —
# Azure's prompts / 20 (mean ~100 tokens, outputs kept), Mooncake's prompts / 100 and outputs
# / 20 (~120 / ~17 tokens) — so that a run at 30% of capacity lasts seconds, not minutes, on
# these engines (8 policies x 3 loads x 3 repetitions per workload).
declare -A WORKLOAD=(
  [sonnet]="--workload sonnet --input-mean 55 --input-std 15 --output-mean 15 --output-std 8"
  [azure]="--workload azure-code --length-scale 0.05 --output-scale 1"
  [mooncake]="--workload mooncake --length-scale 0.01 --output-scale 0.05"
)
# Requests per run: a run measures a sustained rate only when its arrivals last several times a
# request's JCT (the tournament's "steady" rule); sonnet's short requests need a few hundred, or
# its capacity is the burst the engines absorb (60 requests: 650 req/s, all in 0.1 s).
declare -A PROMPTS=([sonnet]=200 [azure]=60 [mooncake]=60)
n_of() { echo "${NUM_PROMPTS:-${PROMPTS[$1]}}"; }
IFS=, read -r -a policies <<<"$POLICIES"
IFS=, read -r -a workloads <<<"$WORKLOADS"
IFS=, read -r -a loads <<<"$LOADS"
npol=${#policies[@]}
PHASE=${PHASE:-all}
case "$PHASE" in all | real | resume | sim) ;; *) echo "PHASE: all, real, resume or sim" >&2; exit 2 ;; esac
declare -A CAPACITY

rate_of() {  # rate_of WORKLOAD LOAD: LOAD x the workload's capacity, 4 significant digits
  "$PY" -c "import sys; print(f'{float(sys.argv[1]) * float(sys.argv[2]):.4g}')" \
    "${CAPACITY[$1]}" "$2"
}

if [ "$PHASE" != sim ]; then
start_serve "$DIR/serve.log" 2 --cpu-affinity auto
url="http://127.0.0.1:$PORT"
uptime | tee -a "$DIR/uptime.txt"
for workload in "${workloads[@]}"; do
  # shellcheck disable=SC2086  # the workload's arguments are words
  "$SY" bench serve --url "$url" --no-progress --policies round_robin --salt 99000 \
    --rates "${CAL_RATE:-8}" --num-prompts "${CAL_PROMPTS:-60}" ${WORKLOAD[$workload]} \
    --result-dir "$DIR/calibration-$workload" >"$DIR/calibration-$workload.log"
done
if [ "$PHASE" = resume ]; then
  while read -r workload capacity; do CAPACITY[$workload]=$capacity; done <"$DIR/capacity.txt"
else
mapfile -t engines < <(sed -n 's/^engine .* ready on \([^,]*\).*$/--from-engine=\1/p' "$DIR/serve.log")
serve_logs=$(sed -n 's/^starting .*; logs in \(.*\)$/\1/p' "$DIR/serve.log")
token=()
[ -f "$serve_logs/engine-token" ] && token=(--token-file "$serve_logs/engine-token")
"$PY" -m switchyard_sim.profiles.build_local "${engines[@]}" "${token[@]}" \
  --name local-validation --out "$DIR/profile.json"
: >"$DIR/capacity.txt"
for workload in "${workloads[@]}"; do
  # shellcheck disable=SC2086
  CAPACITY[$workload]=$("$PY" "$ROOT/loadtest/experiments/sim_capacity.py" \
    --profile "$DIR/profile.json" --engines 2 "${SLO[@]}" --num-prompts "$(n_of "$workload")" \
    ${WORKLOAD[$workload]} 2>>"$DIR/capacity.log" | tail -1) ||
    { tail -1 "$DIR/capacity.log" >&2; exit 1; }
  echo "$workload ${CAPACITY[$workload]}" >>"$DIR/capacity.txt"
  echo "capacity $workload: ${CAPACITY[$workload]} req/s" | tee -a "$DIR/capacity.log"
done
fi

for workload in "${workloads[@]}"; do
  for load in "${loads[@]}"; do
    rate=$(rate_of "$workload" "$load")
    # shellcheck disable=SC2086
    "$SY" bench serve --url "$url" --no-progress --policies round_robin --salt 500 \
      --rates "$rate" --num-prompts "$(n_of "$workload")" ${WORKLOAD[$workload]} \
      --result-dir "$DIR/warmup/$workload-$load" >"$DIR/warmup-$workload-$load.log"
    for rep in $(seq "$REPS"); do
      for k in $(seq 0 $((npol - 1))); do
        i=$(((k + rep - 1) % npol))  # A B C, B C A, C A B: no policy always first or last
        policy=${policies[$i]}
        name="$workload-$load-rep$rep-$policy"
        echo "$name @$rate req/s: $(uptime)" >>"$DIR/uptime.txt"
        # shellcheck disable=SC2086
        "$SY" bench serve --url "$url" --no-progress --policies "$policy" \
          --salt $((rep * 1000 + i)) --rates "$rate" --num-prompts "$(n_of "$workload")" "${SLO[@]}" \
          ${WORKLOAD[$workload]} --result-dir "$DIR/real/$name" >"$DIR/real/$name.log"
        "$PY" -c 'import json, sys; r = json.load(open(sys.argv[1]))["runs"][0]
print("%s: %.1f%% within SLO" % (sys.argv[2], 100 * (r.get("slo_attainment") or 0)))' \
          "$DIR/real/$name/summary.json" "$name"
      done
    done
  done
done
uptime | tee -a "$DIR/uptime.txt"
stop_serve
fi
case "$PHASE" in real | resume) exit 0 ;; esac

while read -r workload capacity; do CAPACITY[$workload]=$capacity; done <"$DIR/capacity.txt"
for workload in "${workloads[@]}"; do
  for load in "${loads[@]}"; do
    rate=$(rate_of "$workload" "$load")
    for rep in $(seq "$REPS"); do
      [ -d "$DIR/real/$workload-$load-rep$rep-${policies[0]}" ] || continue  # not run for real
      # shellcheck disable=SC2086
      "$SY" bench simulate --profile "$DIR/profile.json" --engines 2 --roles any,any \
        --no-progress --policies "$POLICIES" --salt $((rep * 1000)) --rates "$rate" \
        --num-prompts "$(n_of "$workload")" "${SLO[@]}" ${WORKLOAD[$workload]} \
        --result-dir "$DIR/sim/$workload-$load-rep$rep" >"$DIR/sim/$workload-$load-rep$rep.log"
    done
  done
done
"$PY" "$ROOT/loadtest/experiments/validate_table.py" "$DIR"
