#!/usr/bin/env bash
# router_core's predicted TTFT against the real one on engines whose KV is full (issue 21): 2
# SmolLM2 engines pinned to their own cores with NUM_PAGES KV pages each, IN-token prompts and
# OUTPUT tokens out (no early stop) at RATE req/s, adaptive placing every request; REPS
# repetitions on their own prompts, after one discarded warm-up. The route header carries each
# request's predicted TTFT (`ttft_ms=`); kv_wait_table.py sets it against the measured one.
# Follow docs/benchmarking.md "Quiet runs": load average below 1, nothing else running.
#   loadtest/experiments/kv_wait_real.sh
#   SWITCHYARD=path/to/another/switchyard NAME=kv-wait-before loadtest/experiments/kv_wait_real.sh
source "$(dirname "$0")/common.sh"
SY=${SWITCHYARD:-$SY}
NUM_PAGES=${NUM_PAGES:-200}
IN=${IN:-100}
OUTPUT=${OUTPUT:-200}
RATE=${RATE:-8}
NUM_PROMPTS=${NUM_PROMPTS:-80}
REPS=${REPS:-3}
NAME=${NAME:-kv-wait-real}
DIR="$OUT/$NAME"
mkdir -p "$DIR"
start_serve "$DIR/serve.log" 2 --cpu-affinity auto --num-pages "$NUM_PAGES"
url="http://127.0.0.1:$PORT"
uptime | tee "$DIR/uptime.txt"
for rep in $(seq 0 "$REPS"); do
  # Repetition 0 is the warm-up (an engine's first steps of new batch shapes are slower).
  "$SY" bench serve --url "$url" --no-progress --policies adaptive --salt $((rep * 1000)) \
    --rates "$RATE" --num-prompts "$NUM_PROMPTS" --workload sonnet --input-mean "$IN" \
    --input-std 0 --output-mean "$OUTPUT" --output-std 0 --slo-ttft-ms 2000 --slo-tpot-ms 200 \
    --result-dir "$DIR/rep$rep" >"$DIR/rep$rep.log"
  echo "rep $rep: $(grep 'SLO attainment' "$DIR/rep$rep.log" | awk '{print $NF}')% ($(uptime | sed 's/.*load/load/'))"
done
stop_serve
"$ROOT/.venv/bin/python" "$(dirname "$0")/kv_wait_table.py" "$DIR"/rep[1-9]*/
