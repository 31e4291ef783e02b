#!/usr/bin/env bash
# (d) adaptive vs every fixed pattern on the shifting workload (prefill-heavy and decode-heavy
# phases alternating mid-run), one rate. The seeds' claim behind it: the best pattern shifts
# with the workload (MicroServing, DynaServe), so a policy that chooses per request should match
# the best fixed one in each phase. `switchyard bench tournament` asks the same across regimes.
#   loadtest/experiments/adaptive.sh sim    # H100 70B TP4 profile, two engines
#   loadtest/experiments/adaptive.sh real   # 2 SmolLM2 engines here, lengths / 8
source "$(dirname "$0")/common.sh"
POLICIES=${POLICIES:-round_robin,cache_aware,pd,balanced_pd,tandem,slo_mux,adaptive}
if [ "$(mode "${1:-}")" = sim ]; then
  # adaptive places each request from predictions; phases of 150 requests at 3 req/s = 50 s.
  simulate adaptive-sim --profile h100-llama3.1-70b-fp8-tp4 --engines 2 --roles any,any \
    --workload shifting --prefill-heavy 4000,20 --decode-heavy 200,600 --phase-requests 150 \
    --policies "$POLICIES" --slo-ttft-ms 2000 --slo-tpot-ms 100 --rates 3,6 \
    --num-prompts "${NUM_PROMPTS:-600}"
else
  real adaptive-real 2 --workload shifting --prefill-heavy 512,4 --decode-heavy 32,64 \
    --phase-requests 10 --policies "$POLICIES" --slo-ttft-ms 2000 --slo-tpot-ms 100 \
    --rates 0.5 --num-prompts "${NUM_PROMPTS:-40}"
fi
