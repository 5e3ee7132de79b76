#!/bin/bash
# perf-notes Change 60's device call, in one command (~6 min): the checks under the widest
# mode, then bf16 rows alternating the modes, then a kernel trace of 188m under `norm`.
#   here:  git apply bench/gpu-gemv/stage.patch && git add -N plugins/backends/gpu/k_gemv_stage.cu
#          RLX_GPU_ROOT=/tmp/rlx-gpu-new GPU_CHECK_INCREMENTAL=1 bash tools/gpu-check.sh pack $PWD/.gpu-st
#   there: bash bench/gpu-gemv/stage-call.sh   (the device tool's run, carrying .gpu-st and
#          bench/gpu-trace/kernel_trace.so)
set -u
export RLX_GPU_ROOT=${RLX_GPU_ROOT:-/tmp/rlx-gpu-new}
S=RLX_GPU_GEMV_STAGE C=RLX_GPU_CARVEOUT=100
nvidia-smi --query-gpu=name --format=csv,noheader
# ring sends every one-row 16-bit GEMV the plan takes through the staged kernel
env $S=ring ONLY='^(conformance|test_llama_parity|test_half_parity|test_generate)$' \
    timeout 170 bash tools/gpu-ab.sh .gpu-st check 2>&1 | tail -25
export GPU_ENV_UNPACKED=1
AB188="base:$S=0 norm:$S=norm normc:$S=norm,$C gluc:$S=glu,$C all:$S=all allc:$S=all,$C base:$S=0 normc:$S=norm,$C allc:$S=all,$C" \
    AB1="base:$S=0 normc:$S=norm,$C" ABTO=80 timeout 180 bash tools/gpu-ab.sh .gpu-st ab 2>&1 | tail -12
KTV="knormc:188m:$S=norm,$C" timeout 45 bash tools/gpu-ab.sh .gpu-st ktrace 2>&1 | tail -3
