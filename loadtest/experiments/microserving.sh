#!/usr/bin/env bash
# (a) MicroServing: data parallel vs prefill/decode disaggregation vs balanced PD, mean and P99
# TTFT / TPOT / JCT as the rate rises. Seed: Llama-3.1-70B FP8 on 8xH100 as two TP4 engines,
# LLMPerf sonnet prompts of ~3000 tokens in / ~100 out, 1.6-5.6 req/s; PD -16% mean JCT and
# -28% P99 JCT against DP.
#   loadtest/experiments/microserving.sh sim    # the seed's scale, H100 profile (minutes)
#   loadtest/experiments/microserving.sh real   # 2 SmolLM2 engines here, lengths / 10
source "$(dirname "$0")/common.sh"
POLICIES=${POLICIES:-round_robin,pd,balanced_pd}
if [ "$(mode "${1:-}")" = sim ]; then
  simulate microserving-sim --profile h100-llama3.1-70b-fp8-tp4 --engines 2 \
    --workload sonnet --input-mean 3000 --input-std 300 --output-mean 100 --output-std 10 \
    --policies "$POLICIES" --rates 1.6,2.4,3.2,4,4.8,5.6 --num-prompts "${NUM_PROMPTS:-500}"
else
  real microserving-real 2 --workload sonnet --input-mean 300 --input-std 30 \
    --output-mean 10 --output-std 2 --policies "$POLICIES" --rates 0.5,1 \
    --num-prompts "${NUM_PROMPTS:-20}"
fi
