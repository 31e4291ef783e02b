#!/usr/bin/env bash
# (b) DynaServe: colocated (least_load, chunked prefill on both engines) vs PD vs tandem, on a
# prefill-heavy and a decode-heavy mix; capacity = the highest rate whose SLO attainment stays
# >= 90% under an ITL (TPOT) SLO of 100 ms and a TTFT SLO. Seed: two GPUs, real traces, 100 ms
# SLO; tandem serves up to 1.14x the load of PD and 1.23x of colocation (decode-heavy).
#   loadtest/experiments/dynaserve.sh sim    # H100 70B TP4 profile, two engines
#   loadtest/experiments/dynaserve.sh real   # 2 SmolLM2 engines here, lengths / 10
source "$(dirname "$0")/common.sh"
POLICIES=${POLICIES:-least_load,pd,tandem}
if [ "$(mode "${1:-}")" = sim ]; then
  common=(--profile h100-llama3.1-70b-fp8-tp4 --engines 2 --workload sonnet --policies
    "$POLICIES" --slo-tpot-ms 100)
  # TTFT SLOs: prefill-heavy 1000 ms (5x its light-load TTFT, 188 ms); decode-heavy 500 ms (its
  # light-load TTFT is ~35 ms: the ITL SLO is what binds there, as in the seed).
  simulate dynaserve-prefill-heavy-sim "${common[@]}" --input-mean 4000 --input-std 800 \
    --output-mean 100 --output-std 20 --slo-ttft-ms 1000 --rates 2,4,6,8,10,12 \
    --num-prompts "${NUM_PROMPTS:-200}"
  # Requests live ~10 s: 800 per run so the decode batch reaches its steady size at 40 req/s.
  simulate dynaserve-decode-heavy-sim "${common[@]}" --input-mean 500 --input-std 100 \
    --output-mean 800 --output-std 200 --slo-ttft-ms 500 --rates 10,20,30,40 \
    --num-prompts "${NUM_PROMPTS:-800}"
else
  common=(--workload sonnet --policies "$POLICIES" --num-prompts "${NUM_PROMPTS:-16}")
  real dynaserve-prefill-heavy-real 2 "${common[@]}" --input-mean 400 --input-std 80 \
    --output-mean 10 --output-std 2 --slo-ttft-ms 2000 --slo-tpot-ms 100 --rates 0.5,1
  real dynaserve-decode-heavy-real 2 "${common[@]}" --input-mean 50 --input-std 10 \
    --output-mean 80 --output-std 20 --slo-ttft-ms 1000 --slo-tpot-ms 100 --rates 0.5,1
fi
