#!/bin/bash
# A/B experiments on the GPU machine over a tree packed by `tools/gpu-check.sh pack DIR`:
#   tools/gpu-ab.sh DIR MODES     MODES: a comma list of
#     check  tools/gpu-check.sh run, only the rows matching ONLY (default ^conformance$)
#     conf   the conformance suite again under CONFENV="VAR=v,VAR=v"
#     ab     bf16 rlx-bench rows (--prefill 512 --decode 128 --reps 3, or ABARGS), one per "label:VAR=v,..."
#            in AB1 (llama-1b) and AB188 (llama-188m), in the order given (interleave them)
#     prof   RLX_GPU_PROFILE=1 tables, one per "label:1b|188m:VAR=v,..." in PROFV (PROFN lines;
#            PROFARGS replaces the shape, default --prefill 512 --decode 64 --reps 1)
#     ncu    Nsight Compute per kernel, one per "label:1b|188m:VAR=v,..." in NCUV: kernels
#            matching NCUK (default k_gemv), NCUN of them after NCUSKIP; the report in $OUT
#     tpab   LLaMA-8B-width rows on GPUs 0,1 (and 0), one per "label:devs:VAR=v,..." in TPAB, over
#            the model check's tp-speed row made (GPU_CHECK_KEEP=1), or made here when absent
#     ktrace every kernel's GPU start and end (graph nodes too) of one rlx-bench row per
#            "label:1b|188m|tp1|tp2:VAR=v,..." in KTV (tp1, tp2: the tpab model on --devices 0
#            or 0,1), through bench/gpu-trace/kernel_trace.so (CUPTI; carry it built), as
#            $OUT/kt-LABEL.csv.xz (bench/gpu-trace/layer_table.py prints its per-kernel layer table;
#            with RLX_KTRACE_API=1 in the row's VARs, step_table.py what a step does between replays)
#     san    compute-sanitizer (SANT, default memcheck) over the conformance suite, SANENV
#     persist  bench/gpu-persist/persist.cu (the one-kernel-a-token prototype) built with nvcc
#            (PERSISTFLAGS, e.g. -DPHASE_TIMING), one run per "shape:arg,arg,..." in PERSIST
#            (default the ring 4 x 32 KB on 1b32k and 188m)
#     gemv   bench/gpu-gemv/gemv_bench.cu (one-row GEMVs of the decode shapes: main's k_gemv, the
#            streaming form and a plain read of the same bytes), the binary carried as
#            .gpu-bench/gemv_bench or built here with nvcc; GEMVONLY picks shapes by name
# e.g. AB1="off:RLX_GPU_PDL=0 on:" tools/gpu-ab.sh .gpu ab  (the device tool's run, carrying .gpu)
set -u
dir=${1:?usage: tools/gpu-ab.sh DIR MODES}
modes=${2:-check}
root=${RLX_GPU_ROOT:-/tmp/rlx-gpu}; build=${RLX_GPU_BUILD:-$root/build}
out=${OUT:-/tmp/out}; mkdir -p "$out"
top=$PWD
if [[ ,$modes, == *,check,* ]]; then
  mkdir -p "$out/check"
  GPU_CHECK_ONLY="${ONLY:-^conformance$}" OUT=$out/check bash tools/gpu-check.sh run "$dir" 2>&1 | grep -v '^====' | tail -40
  GPU_ENV_UNPACKED=1
fi
. tools/gpu-env.sh # unpack (unless check did), cd $build, the tests' environment
nvidia-smi --query-gpu=name --format=csv,noheader
envrun() { # "VAR=v,VAR=v" cmd...
  local e=$1; shift; local a=(); IFS=, read -ra a <<<"$e"; env "${a[@]}" "$@"; }
bench() { # envs model-args...: one bf16 row, its prefill and decode tok/s; rc, seconds and the
  # output's tail when rlx-bench fails or times out (ABTO s, default 150). ABARGS replaces
  # the row's shape (default --prefill 512 --decode 128 --reps 3), e.g. with --decode-depth
  local e=$1; shift; local t0=$SECONDS o rc
  o=$(envrun "$e" timeout ${ABTO:-150} ./tools/rlx-bench "$@" --backend cuda ${ABARGS:---prefill 512 --decode 128 --reps 3} \
      --precision bf16 --json 2>&1); rc=$?
  grep -o -e '"decode_tokens_per_s":[^,}]*' -e '"prefill_tokens_per_s":[^,}]*' -e '"generate_tokens_per_s":[^,}]*' \
      -e '"[a-z_]*_vs_copy_bandwidth":[^,}]*' -e 'error.*' <<<"$o" | tr '\n' ' '
  [ $rc = 0 ] || printf 'rc=%s after %ss: %s' $rc $((SECONDS - t0)) "$(tail -c 300 <<<"$o" | tr '\n' ' ')"; }
if [[ ,$modes, == *,ab,* ]]; then
  for cfg in 1b 188m; do
    v=AB1; [ $cfg = 188m ] && v=AB188
    for spec in ${!v:-}; do
      label=${spec%%:*}; e=${spec#*:}; [ "$e" = "$spec" ] && e=""
      echo "AB $cfg $label: $(bench "X=1${e:+,$e}" --config $root/llama-$cfg-config.json)"
    done
  done
fi
if [[ ,$modes, == *,prof,* ]]; then
  for spec in ${PROFV:-}; do
    label=${spec%%:*}; r=${spec#*:}; cfg=${r%%:*}; e=${r#*:}; [ "$e" = "$r" ] && e=""
    echo "==== prof $label $cfg"
    envrun "RLX_GPU_PROFILE=1${e:+,$e}" ./tools/rlx-bench --config $root/llama-$cfg-config.json --backend cuda \
      ${PROFARGS:---prefill 512 --decode 64 --reps 1} --precision bf16 --json 2>&1 | grep -v '^{' | head -${PROFN:-45}
  done
fi
if [[ ,$modes, == *,conf,* ]]; then # conformance again under CONFENV
  t0=$SECONDS; envrun "X=1${CONFENV:+,$CONFENV}" ./tests/test_gpu_ops > $out/conf.log 2>&1; echo "conf($CONFENV) rc=$? $((SECONDS-t0))s $(grep -h '^[0-9]*%: Checks' $out/conf.log)"
  grep -m3 ':[FE]:' $out/conf.log | cut -c1-300
fi
if [[ ,$modes, == *,ncu,* ]]; then # NCUV="label:cfg:VAR=v,..." NCUK=regex NCUSKIP NCUN
  ncu=$(ls /usr/local/cuda/bin/ncu /usr/local/cuda/nsight-compute*/ncu 2>/dev/null | head -1); echo "ncu=$ncu"
  for spec in ${NCUV:-}; do
    label=${spec%%:*}; r=${spec#*:}; cfg=${r%%:*}; e=${r#*:}; [ "$e" = "$r" ] && e=""
    envrun "X=1${e:+,$e}" timeout ${NCUTO:-200} $ncu -k "regex:${NCUK:-k_gemv}" --launch-skip ${NCUSKIP:-60} --launch-count ${NCUN:-8} \
      --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section LaunchStats --section Occupancy --section SchedulerStats \
      ./tools/rlx-bench --config $root/llama-$cfg-config.json --backend cuda --prefill 16 --decode 8 --reps 1 --precision bf16 --no-reference --json > $out/ncu-$label.txt 2>&1
    echo "==== ncu $label rc=$?"
    grep -E '^  [a-zA-Z_]|Duration|DRAM Throughput|Memory Throughput|Grid Size|Block Size|Registers|Dynamic Shared|Achieved Occupancy|Stall|Warp Cycles Per Issued|Issued Warp|No Eligible|One or More' $out/ncu-$label.txt | grep -v '^    ---' | head -${NCUL:-200}
  done
fi
if [[ ,$modes, == *,ktrace,* ]]; then # KTV="label:cfg:VAR=v,..." KTARGS replaces the shape
  for spec in ${KTV:-}; do
    label=${spec%%:*}; r=${spec#*:}; cfg=${r%%:*}; e=${r#*:}; [ "$e" = "$r" ] && e=""
    margs=(--config $root/llama-$cfg-config.json)
    if [[ $cfg == tp* ]]; then
      tp_env # gpu-env.sh
      [ -f "$tp_model/model.safetensors" ] || python3 "$root/src/tools/make-8b-model.py" "$root/llama-8b-bf16-config.json" \
        "$tp_model" >"$out/tp-model.log" 2>&1
      margs=(--model "$tp_model" --devices $([ $cfg = tp2 ] && echo 0,1 || echo 0))
    fi
    envrun "X=1${e:+,$e}" env CUDA_INJECTION64_PATH="$top/bench/gpu-trace/kernel_trace.so" RLX_KTRACE_OUT="$out/kt-$label.csv" \
      LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64:/usr/local/cuda/targets/x86_64-linux/lib" \
      timeout ${KTTO:-200} ./tools/rlx-bench "${margs[@]}" --backend cuda \
      ${KTARGS:---prefill 512 --decode 32 --reps 1} --precision bf16 --no-reference --json > $out/kt-$label.log 2>&1
    echo "==== ktrace $label rc=$? $(grep -o '"decode_tokens_per_s":[^,]*' $out/kt-$label.log) $(wc -l < $out/kt-$label.csv) kernels"
    tail -2 $out/kt-$label.log | cut -c1-200; xz -f $out/kt-$label.csv
  done
fi
if [[ ,$modes, == *,tpab,* ]]; then # TPAB="label:0,1:VAR=v,..."
  tp_env # gpu-env.sh
  [ -f "$tp_model/model.safetensors" ] || python3 "$root/src/tools/make-8b-model.py" "$root/llama-8b-bf16-config.json" \
    "$tp_model" >"$out/tp-model.log" 2>&1 || echo "TPAB: no model ($(tail -1 "$out/tp-model.log"))"
  for spec in ${TPAB:-}; do
    label=${spec%%:*}; r=${spec#*:}; devs=${r%%:*}; e=${r#*:}; [ "$e" = "$r" ] && e=""
    echo "TPAB $devs $label: $(bench "X=1${e:+,$e}" --model "$tp_model" --devices $devs)"
  done
fi
if [[ ,$modes, == *,san,* ]]; then
  echo "==== sanitizer ${SANT:-memcheck}"
  envrun "X=1${SANENV:+,$SANENV}" timeout ${SANTO:-300} /usr/local/cuda/bin/compute-sanitizer --tool ${SANT:-memcheck} \
     --error-exitcode 9 ./tests/test_gpu_ops > $out/san.log 2>&1; echo "san rc=$?"; tail -5 $out/san.log
fi
if [[ ,$modes, == *,gemv,* ]]; then
  gb=$top/.gpu-bench/gemv_bench
  if [ ! -x "$gb" ]; then
    gb=/tmp/gemv_bench
    /usr/local/cuda/bin/nvcc -std=c++17 -O3 -gencode arch=compute_90,code=sm_90 -I "$top/plugins/backends/gpu" \
      -I "$top/framework/include" -o "$gb" "$top/bench/gpu-gemv/gemv_bench.cu" > /tmp/gemv-nvcc.log 2>&1 ||
      { echo "gemv: nvcc failed"; tail -5 /tmp/gemv-nvcc.log; }
  fi
  [ -x "$gb" ] && timeout 240 "$gb" ${GEMVONLY:-} 2>&1 | tee "$out/gemv.log"
fi
if [[ ,$modes, == *,persist,* ]]; then # PERSIST="shape:arg,arg,..."
  pb=/tmp/persist-build; mkdir -p "$pb" # the binary stays on the GPU machine
  if ! /usr/local/cuda/bin/nvcc -std=c++17 -O3 -gencode arch=compute_90,code=sm_90 ${PERSISTFLAGS:-} -o "$pb/persist" \
    "$top/bench/gpu-persist/persist.cu" > "$pb/nvcc.log" 2>&1; then
    echo "persist: nvcc failed, no shapes run"; tail -5 "$pb/nvcc.log"
  else
    for spec in ${PERSIST:-1b32k:--stages,4,--stage-kb,32 188m:--stages,4,--stage-kb,32}; do
      shape=${spec%%:*}; a=${spec#*:}; [ "$a" = "$spec" ] && a=""; args=(); IFS=, read -ra args <<<"$a"
      timeout 90 "$pb/persist" --shape "$shape" --barrier counter --ref-tokens 20 "${args[@]}" > "$pb/run.log" 2>&1
      rc=$?; cat "$pb/run.log" >> "$out/persist.log"
      echo "PERSIST $spec rc=$rc $(grep '^{' "$pb/run.log" | tail -1 | grep -o -e '"floor_us":[^,]*' -e '"counter":{[^}]*' | tr '\n' ' ')"
      grep -E '^(phase|qkv|att|o|gu|down|lm) ' "$pb/run.log" # the phase table (PERSISTFLAGS=-DPHASE_TIMING)
    done
  fi
fi
