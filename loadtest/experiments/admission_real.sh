#!/usr/bin/env bash
# Admission by predicted outcome on real engines (issue 47): ENGINES SmolLM2 engines on this
# machine (`switchyard serve`, each engine pinned by --cpu-affinity auto). First the capacity:
# round_robin with admission off at each of CAP_RATES, the highest rate whose SLO attainment is at
# least 90%. Then, at FACTOR x that rate, each policy with admission on and off (switched live
# by PUT /admin/admission), interleaved REPS times (the order rotates with the repetition; each
# repetition first warms the engines up at the rate, discarded), every run with its own salt.
# Prints each run's goodput (offered rate x share within SLO) and, per policy, the medians with
# admission on and off, their spread and the ratio.
# Follow docs/benchmarking.md "Quiet runs": load average below 1 before starting, nothing else
# running.
#   loadtest/experiments/admission_real.sh                 # 2 engines, ~10 minutes here
#   CAP_RATES=20,40 FACTOR=3 loadtest/experiments/admission_real.sh
source "$(dirname "$0")/common.sh"
ENGINES=${ENGINES:-2}
REPS=${REPS:-3}
POLICIES=${POLICIES:-round_robin,adaptive}
NUM_PROMPTS=${NUM_PROMPTS:-200}
CAP_RATES=${CAP_RATES:-10,20,30,40,60}
FACTOR=${FACTOR:-2}
SLO=(--slo-ttft-ms 2000 --slo-tpot-ms 200)  # the tournament's local-profile SLO
# the tournament's local sonnet sizes (docs/experiments.md)
WORKLOAD=(--workload sonnet --input-mean 55 --input-std 15 --output-mean 15 --output-std 8)
NAME="admission-real-$ENGINES"
DIR="$OUT/$NAME"
mkdir -p "$DIR"
start_serve "$DIR/serve.log" "$ENGINES" --cpu-affinity auto
url="http://127.0.0.1:$PORT"

# admission on|off: the router's admission by predicted outcome, for requests from now on.
admission() {
  curl -sf -X PUT "$url/admin/admission" -H 'content-type: application/json' \
    -d "{\"predicted\": \"$1\"}" >/dev/null
}

# attainment RESULT_DIR: the run's SLO attainment (a fraction).
attainment() {
  "$ROOT/.venv/bin/python" -c 'import json, sys
print(json.load(open(sys.argv[1] + "/summary.json"))["runs"][0]["slo_attainment"] or 0)' "$1"
}

# run POLICY RATE SALT DIR: one `bench serve` run.
run() {
  "$SY" bench serve --url "$url" --no-progress --policies "$1" --rates "$2" --salt "$3" \
    --num-prompts "$NUM_PROMPTS" "${SLO[@]}" "${WORKLOAD[@]}" --result-dir "$4" >"$4.log"
}

uptime | tee "$DIR/uptime.txt"
admission off
run round_robin 10 1 "$DIR/warmup-capacity"
capacity=0
IFS=, read -r -a cap_rates <<<"$CAP_RATES"
for rate in "${cap_rates[@]}"; do
  run round_robin "$rate" $((2000 + rate)) "$DIR/capacity-$rate"
  share=$(attainment "$DIR/capacity-$rate")
  echo "capacity probe round_robin @$rate: attainment $share ($(uptime | sed 's/.*load/load/'))"
  if "$ROOT/.venv/bin/python" -c "import sys; sys.exit(0 if float(sys.argv[1]) >= 0.9 else 1)" \
    "$share"; then
    capacity=$rate
  fi
done
if [ "$capacity" = 0 ]; then
  echo "no rate of $CAP_RATES kept 90% within SLO: give lower CAP_RATES" >&2
  exit 1
fi
rate=$("$ROOT/.venv/bin/python" -c "import sys; print(float(sys.argv[1]) * float(sys.argv[2]))" \
  "$capacity" "$FACTOR")
echo "capacity $capacity req/s; runs at $rate req/s" | tee -a "$DIR/uptime.txt"
IFS=, read -r -a policies <<<"$POLICIES"
runs=()
for policy in "${policies[@]}"; do
  runs+=("$policy on" "$policy off")
done
n=${#runs[@]}
for rep in $(seq "$REPS"); do
  admission on
  run round_robin "$rate" $((rep * 1000)) "$DIR/warmup-$rep"
  for k in $(seq 0 $((n - 1))); do
    i=$(((k + rep - 1) % n))
    read -r policy mode <<<"${runs[$i]}"
    admission "$mode"
    run "$policy" "$rate" $((rep * 1000 + i + 1)) "$DIR/$policy-$mode-rep$rep"
    echo "rep $rep $policy admission $mode: attainment $(attainment "$DIR/$policy-$mode-rep$rep")" \
      "($(uptime | sed 's/.*load/load/'))"
  done
done
admission on
uptime | tee -a "$DIR/uptime.txt"
"$ROOT/.venv/bin/python" - "$DIR" "$rate" "$POLICIES" <<'EOF'
import glob, json, statistics, sys
base, rate, policies = sys.argv[1], float(sys.argv[2]), sys.argv[3].split(",")
print(f"goodput (req/s within SLO: {rate:g} req/s offered x attainment), median [min-max]")
for policy in policies:
    got = {}
    for mode in ("on", "off"):
        runs = [json.load(open(p))["runs"][0]
                for p in sorted(glob.glob(f"{base}/{policy}-{mode}-rep*/summary.json"))]
        got[mode] = [rate * (r["slo_attainment"] or 0) for r in runs]
        refused = [r.get("refused", 0) for r in runs]
        p99 = [r.get("p99_refused_ms") for r in runs]
        print(f"  {policy:<12} admission {mode:<3}: {statistics.median(got[mode]):6.2f} "
              f"[{min(got[mode]):.2f}-{max(got[mode]):.2f}]  refused {refused}  "
              f"refusal p99 ms {[None if v is None else round(v, 1) for v in p99]}")
    off = statistics.median(got["off"])
    ratio = statistics.median(got["on"]) / off if off else float("inf")
    print(f"  {policy:<12} on / off = {ratio:.2f}x")
EOF
