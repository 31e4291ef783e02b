#!/usr/bin/env bash
# The one GPU check (docs/gpu.md), for the lent H200: tests/gpu/check.sh RESULTS_DIR
#
# Needs `make gpu-bundle` run beforehand on the machine that sends the working tree (it fills
# .gpu-bundle/: pruned flashinfer, wheels the image lacks, the abi3 router_core extension, the
# generated stubs, SmolLM2's tokenizer). Stages, each under its own time limit and all inside
# DEADLINE_S (default 470 s, under the 8 minutes the issue allows):
#   jit        FlashInfer's nvcc builds, started first in the background (timed)
#   identity   fp32 CUDA engine vs its CPU path, greedy tokens (runner lockstep + EngineCore)
#   ipc        CUDA IPC between processes: bit-exact link; pd and balanced_pd == one engine
#   flashinfer FlashInfer vs the torch backend on random pages; CUDA-graph decode == eager
#   bench      8B-shape decode b=1/32/128 and prefill 2048 vs floors and transformers; KV GB/s
# RESULTS_DIR receives two files: summary.json (every figure) and logs.tar.gz (each stage's log and
# JSON, kept meanwhile in SWITCHYARD_GPU_WORK); the short table prints last. Two files, because
# the device tool brings back at most 8 from $OUT (docs/gpu.md has the exact call).
set -uo pipefail

RESULTS_ARG=${1:?usage: tests/gpu/check.sh RESULTS_DIR}
mkdir -p "$RESULTS_ARG"
OUTPUT=$(cd "$RESULTS_ARG" && pwd)
RESULTS=${SWITCHYARD_GPU_WORK:-$(mktemp -d /tmp/switchyard-gpu-work.XXXXXX)}
mkdir -p "$RESULTS"
cd "$(dirname "$0")/../.."
REPO=$PWD
BUNDLE=${SWITCHYARD_GPU_BUNDLE:-$REPO/.gpu-bundle}
SITE=${SWITCHYARD_GPU_SITE:-/tmp/switchyard-gpu-site}
PY=${PYTHON:-python3}
DEADLINE_S=${DEADLINE_S:-470}
START=$SECONDS

left() { echo $((DEADLINE_S - (SECONDS - START))); }
note() { "$PY" -m tests.gpu.results "$1" "${@:2}" >/dev/null 2>&1 || true; }

# stage NAME LIMIT_S CMD...: runs CMD under min(LIMIT_S, time left), logs to RESULTS/NAME.log.
stage() {
    local name=$1 limit=$2
    shift 2
    local budget
    budget=$(left)
    if ((budget < 20)); then
        echo "== $name: skipped, ${budget} s left"
        note "$name" "skipped (deadline)"
        return 0
    fi
    ((limit > budget)) && limit=$budget
    echo "== $name (limit ${limit} s)"
    local t0=$SECONDS
    timeout --kill-after=10 "$limit" "$@" >"$RESULTS/$name.log" 2>&1
    local rc=$?
    local status="ok"
    ((rc == 124 || rc == 137)) && status="timed out"
    ((rc != 0 && rc != 124 && rc != 137)) && status="failed rc=$rc"
    note "$name" "$status in $((SECONDS - t0)) s"
    tail -n 12 "$RESULTS/$name.log"
    return 0
}

echo "== setup"
if [[ ! -d $BUNDLE ]]; then
    echo "no $BUNDLE: run 'make gpu-bundle' where the working tree is sent from" >&2
    exit 2
fi
mkdir -p "$SITE"
"$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$SITE" "$BUNDLE"/wheels/*.whl || exit 2
tar -xJf "$BUNDLE/flashinfer.tar.xz" -C "$SITE" || exit 2
cp "$BUNDLE"/router_core/*.so router_core/ || exit 2
[[ -d switchyard_rpc ]] || cp -r "$BUNDLE/switchyard_rpc" . || exit 2
export PYTHONPATH=$REPO:$SITE${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1
export SWITCHYARD_GPU_RESULTS=$RESULTS SWITCHYARD_GPU_BUNDLE=$BUNDLE
export SWITCHYARD_CACHE_DIR=/tmp/switchyard-cache
export FLASHINFER_WORKSPACE_BASE=/tmp/switchyard-flashinfer FLASHINFER_CUDA_ARCH_LIST=${FLASHINFER_CUDA_ARCH_LIST:-9.0a}
export MAX_JOBS=${MAX_JOBS:-8}
{
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv
    "$PY" -c "import sys, torch, grpc, google.protobuf as pb; print(sys.version); \
print('torch', torch.__version__, torch.version.cuda, torch.cuda.get_device_name()); \
print('grpc', grpc.__version__, 'protobuf', pb.__version__)"
    "$PY" -c "import router_core, flashinfer; print('router_core ok, flashinfer', flashinfer.__version__)"
    nvcc --version | tail -n 2
    nproc
} >"$RESULTS/env.log" 2>&1
cat "$RESULTS/env.log"
note setup "ok in $((SECONDS - START)) s"

echo "== jit (background)"
JIT_START=$SECONDS
timeout --kill-after=10 330 "$PY" -m tests.gpu.jit_warm >"$RESULTS/jit.log" 2>&1 &
JIT_PID=$!

PYTEST=("$PY" -m pytest -q -p no:cacheprovider -m cuda -o "addopts=" --timeout=400)
stage identity 150 "${PYTEST[@]}" tests/gpu/test_engine_cuda_identity.py
stage ipc 150 "${PYTEST[@]}" tests/gpu/test_cuda_ipc_gpu.py

echo "== waiting for the FlashInfer build"
wait "$JIT_PID"
JIT_RC=$?
note jit "rc=$JIT_RC in $((SECONDS - JIT_START)) s"
tail -n 5 "$RESULTS/jit.log"

stage flashinfer 150 "${PYTEST[@]}" tests/gpu/test_flashinfer_gpu.py
stage bench 240 "$PY" -m tests.gpu.bench_gpu

echo "== total $((SECONDS - START)) s"
note total "$((SECONDS - START)) s"
tar -czf "$OUTPUT/logs.tar.gz" -C "$RESULTS" .
"$PY" -m tests.gpu.summary "$RESULTS" "$OUTPUT/summary.json"
