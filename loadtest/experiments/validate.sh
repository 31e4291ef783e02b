#!/usr/bin/env bash
# Simulator validation (issue 10, item 5): two real SmolLM2 engines on this machine vs the
# simulator with this machine's profile, same prompts (same salt), same arrivals (same seed).
#  1. start 2 engines + router; a calibration sweep warms the engines' online step model;
#  2. the profile: both engines' fitted models, averaged (build_local --from-engine x2), frozen
#     BEFORE the validation sweep;
#  3. the validation sweep on the real engines (fresh prompts), then the same in the simulator;
#  4. the table: mean JCT and P90 TTFT per policy, real vs simulated, and the error.
# The engines require the deployment's token (serve writes it to engine-token in the log
# directory it prints); build_local reads it from there.
#   loadtest/experiments/validate.sh        # ~8 minutes here
#   POLICIES=round_robin,pd NUM_PROMPTS=4 RATES=2 loadtest/experiments/validate.sh  # smoke
#   (tests/sim/test_validate_smoke.py runs that in `make test`)
source "$(dirname "$0")/common.sh"
POLICIES=${POLICIES:-round_robin,pd,cache_aware,tandem}
load=(--workload sonnet --input-mean 128 --input-std 32 --output-mean 16 --output-std 4
  --rates "${RATES:-0.5}" --num-prompts "${NUM_PROMPTS:-20}")
VAL="$OUT/validate"
mkdir -p "$VAL"
start_serve "$VAL/serve.log" 2
url="http://127.0.0.1:$PORT"
"$SY" bench serve --url "$url" --no-progress --policies "$POLICIES" --salt 0 "${load[@]}" \
  --result-dir "$VAL/calibration" >"$VAL/calibration.log"
# The profile as validate_grid.sh builds it, deliberately repeated: this is the small run that
# tests/sim/test_validate_smoke.py keeps working, and the one switchyard_sim/profiles/
# local-smollm2-cpu.json came from.
mapfile -t engines < <(sed -n 's/^engine .* ready on \([^,]*\).*$/--from-engine=\1/p' "$VAL/serve.log")
serve_logs=$(sed -n 's/^starting .*; logs in \(.*\)$/\1/p' "$VAL/serve.log")
token=()
[ -f "$serve_logs/engine-token" ] && token=(--token-file "$serve_logs/engine-token")
"$ROOT/.venv/bin/python" -m switchyard_sim.profiles.build_local "${engines[@]}" "${token[@]}" \
  --name local-validation --out "$VAL/profile.json"
uptime | tee "$VAL/uptime.txt"
"$SY" bench serve --url "$url" --no-progress --policies "$POLICIES" --salt 1000 "${load[@]}" \
  --result-dir "$VAL/real"
uptime | tee -a "$VAL/uptime.txt"
stop_serve
"$SY" bench simulate --profile "$VAL/profile.json" --roles any,any --no-progress \
  --policies "$POLICIES" --salt 1000 "${load[@]}" --result-dir "$VAL/sim"
"$ROOT/.venv/bin/python" "$ROOT/loadtest/experiments/compare.py" "$VAL/real/summary.json" \
  "$VAL/sim/summary.json"
