#!/usr/bin/env bash
# (c) Tropical: PD vs SLO-aware multiplexing (slo_mux), SLO attainment as the rate rises, on the
# Mooncake conversation trace. Both run 2 prefill + 2 decode engines (slo_mux's decode engines
# multiplex), as the seed's 4 workers did. Seed: InternLM-20B, 8xA100 as 4 TP2 workers, TTFT
# SLO 5x the light-load latency; 2.09x more requests within 90% SLO attainment than PD.
#   loadtest/experiments/tropical.sh sim    # H100 70B TP4 profile, four engines
#   loadtest/experiments/tropical.sh real   # 4 SmolLM2 engines here, lengths / 20
# SLOs as the seed sets them, 5x the light-load latency of each phase: the H100 profile at 0.3
# req/s gives a mean TTFT of 1.5 s and a TPOT of 10 ms here, hence 7500 ms and 50 ms.
source "$(dirname "$0")/common.sh"
if [ "$(mode "${1:-}")" = sim ]; then
  simulate tropical-sim --profile h100-llama3.1-70b-fp8-tp4 --engines 4 \
    --roles prefill,prefill,decode,decode --workload mooncake --policies pd,slo_mux \
    --slo-ttft-ms 7500 --slo-tpot-ms 50 --rates 0.5,1,1.5,2,2.5,3 \
    --num-prompts "${NUM_PROMPTS:-300}"
else
  real tropical-real 4 --workload mooncake --length-scale 0.05 --policies pd,slo_mux \
    --slo-ttft-ms 3000 --slo-tpot-ms 200 --rates 0.5,1 --num-prompts "${NUM_PROMPTS:-16}"
fi
