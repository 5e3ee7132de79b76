#!/bin/bash
# The GPU checks in one command, for a machine with an NVIDIA GPU but none of the
# project's packages (the device machines): the conformance suite, parity of every
# fixture on --backend cuda (f32 and 16-bit), and the benchmark table.
#
#   tools/gpu-check.sh pack DIR   here (Debian with the build deps and /usr/local/cuda):
#                                 builds the tree and its tests under /tmp/rlx-gpu, packs
#                                 it and the runtime .debs into DIR (carry DIR there)
#   tools/gpu-check.sh run DIR    there: unpacks to the same absolute paths, runs
#                                 everything, prints one table (and writes it to $OUT)
#
# GPU_CHECK_ONLY=REGEX (run) runs only the rows whose name matches (e.g. 'conformance|bench'),
# or tp (tensor parallelism: tp-parity, tp-speed, tp-profile; only where 2 or more GPUs
# are visible), to spend less device time while iterating; unset, everything runs.
# GPU_CHECK_KEEP=1 (run) keeps the generated 8B model (/tmp/rlx-llama8b) for later commands.
# GPU_CHECK_INCREMENTAL=1 (pack) rebuilds in the tree of an earlier pack (a full build when
# a Makefile.am or configure.ac differs from that pack's, e.g. packing another branch).
# RLX_GPU_ROOT (default /tmp/rlx-gpu) and RLX_GPU_BUILD (default $RLX_GPU_ROOT/build): where
# the tree is packed and unpacked, the same on both sides; several packers on one machine
# each need their own. pack with RLX_GPU_BUILD set makes and packs that configured build
# folder as it is (an out-of-tree build of this checkout), with the sources under the root.
set -u
root=${RLX_GPU_ROOT:-/tmp/rlx-gpu}
build=${RLX_GPU_BUILD:-$root/build}
mode=${1:-}
dir=${2:-}
[ -n "$mode" ] && [ -n "$dir" ] || { echo "usage: $0 pack|run DIR" >&2; exit 2; }

# the build system's files (a file list changed: an incremental make would miss new sources)
am_sum() { (cd "$1" && find . -name '*.am' -o -name configure.ac | LC_ALL=C sort | xargs cat | md5sum); }
if [ "$mode" = pack ]; then
    set -e
    top=$(cd "$(dirname "$0")/.." && pwd)
    if [ -n "${RLX_GPU_BUILD:-}" ]; then
        rm -rf "$root/src" && mkdir -p "$root/src"
        (cd "$top" && git ls-files -z | xargs -0 tar -cf - | tar -C "$root/src" -xf -)
        (cd "$build" && make -j"$(nproc)" >/dev/null && make -j"$(nproc)" check TESTS= >/dev/null)
    elif [ "${GPU_CHECK_INCREMENTAL:-}" = 1 ] && [ -f "$root/build/Makefile" ] &&
        [ "$(am_sum "$top")" = "$(am_sum "$root/src")" ]; then
        (cd "$top" && git ls-files -z | xargs -0 tar -cf - | tar -C "$root/src" -xf -)
        (cd "$root/build" && make -j"$(nproc)" >/dev/null && make -j"$(nproc)" check TESTS= >/dev/null)
    else
        [ "${GPU_CHECK_INCREMENTAL:-}" = 1 ] && echo "gpu-check: build files differ from the last pack's: full build"
        rm -rf "$root" && mkdir -p "$root/src" "$root/build"
        (cd "$top" && git ls-files -z | xargs -0 tar -cf - | tar -C "$root/src" -xf -)
        (cd "$root/src" && autoreconf -fi >/dev/null 2>&1)
        (cd "$root/build" && "$root/src/configure" -q --with-cuda >/dev/null && make -j"$(nproc)" >/dev/null &&
            make -j"$(nproc)" check TESTS= >/dev/null)
    fi
    # the benchmark configs: ../shared beside the main checkout (a worktree has none beside it)
    main_top=$(cd "$(git -C "$top" rev-parse --path-format=absolute --git-common-dir)/.." && pwd)
    cp "$main_top/../shared/perf/"llama-*-config.json "$root/" ||
        { echo "gpu-check: no benchmark configs in $main_top/../shared/perf" >&2; exit 1; }
    parts=("${root#/}")
    [ "${build#"$root"/}" = "$build" ] && parts+=("${build#/}")
    mkdir -p "$dir/debs"
    tar -C / --exclude="*.o" --exclude=autom4te.cache --exclude="*.log" --exclude="*.trs" \
        -cJf "$dir/rlx-gpu.tar.xz" "${parts[@]}"
    (cd "$dir/debs" && apt-get download libjansson4 libhwloc15 libopenblas0-pthread libgfortran5 \
        libquadmath0 libpcre2-8-0 libunistring2 libsubunit0 libpng16-16 >/dev/null 2>&1)
    ls -la "$dir" "$dir/debs"
    exit 0
fi

[ "$mode" = run ] || { echo "usage: $0 pack|run DIR" >&2; exit 2; }
out=${OUT:-/tmp}
mkdir -p "$out" || exit 1
. "$(dirname "$0")/gpu-env.sh" # unpack, cd $build, the tests' environment
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$out/gpu.txt"
table=$out/gpu-check.txt
: >"$table"
row() { printf '%-34s %s\n' "$1" "$2" | tee -a "$table"; }
want() { [ -z "${GPU_CHECK_ONLY:-}" ] || [[ $1 =~ $GPU_CHECK_ONLY ]]; }
run_test() { # name cmd...
    local name=$1; shift
    want "$name" || return 0
    local log=$out/$name.log t0=$SECONDS
    "$@" >"$log" 2>&1
    local rc=$?
    local sum
    sum=$(grep -h '^[0-9]*%: Checks' "$log" | tail -1)
    [ $rc = 0 ] || grep -m2 ':[FE]:' "$log" | cut -c1-300 >>"$out/failures.txt"
    row "$name" "$([ $rc = 0 ] && echo PASS || echo "FAIL($rc)") ${sum} $((SECONDS - t0))s"
}
# conformance: every op of the CUDA plugin against float64 (RLX_GPU_BENCH times sgemm/attention)
run_test conformance env RLX_GPU_BENCH=1 ./tests/test_gpu_ops
# parity: the fixture tests pick the backend of highest priority: cuda here
for t in test_llama_parity test_qwen_gemma_parity test_bert_parity test_flux_parity test_flux_diffuse test_vae_parity \
    test_sam_parity test_half_parity \
    test_flow_edit test_abi_compat test_demo test_batch test_generate; do
    [ -x "tests/$t" ] && run_test "$t" "tests/$t"
done
# speed: rlx-bench with same-run ceilings, f32 and bf16
for cfg in llama-188m-config.json llama-1b-config.json; do
    for prec in f32 bf16; do
        log=$out/bench-${cfg%-config.json}-$prec.json
        want "bench ${cfg%-config.json} $prec" || continue
        ./tools/rlx-bench --config "$root/$cfg" --backend cuda --prefill 512 --decode 128 --reps 3 \
            --precision "$prec" --json >"$log" 2>"$log.err"
        row "bench ${cfg%-config.json} $prec" "rc=$? $(tr -d '\n' <"$log" | head -c 400)"
        # same-run ceilings (the backend's copy bandwidth and cuBLAS GEMM) and device memory
        row "ceilings ${cfg%-config.json} $prec" "$(grep -o -e '"reference":{[^}]*}' \
            -e '"decode_vs_copy_bandwidth":[^,}]*' -e '"decode_floor_tokens_per_s":[^,}]*' \
            -e '"prefill_vs_gemm":[^,}]*' -e '"memory":{[^}]*}' "$log" | tr '\n' ' ')"
    done
done
# batched decode: B sequences in one step (aggregate tokens/s), 1B bf16; up to 16 rows a step
# the 16-bit products run on the tensor-core GEMV, more on cuBLAS
for B in 1 4 8 16 32 64; do
    want "batch 1b bf16 B=$B" || continue
    log=$out/batch-1b-bf16-$B.json
    ./tools/rlx-bench --config "$root/llama-1b-config.json" --backend cuda --prefill 512 --decode 128 --reps 3 \
        --precision bf16 --batch "$B" --no-reference --json >"$log" 2>"$log.err"
    row "batch 1b bf16 B=$B" "rc=$? $(grep -o -e '"decode_tokens_per_s":[^,}]*' -e '"kv_cache_bytes":[^,}]*' "$log" |
        tr '\n' ' ') $(head -c 200 "$log.err")"
done
# memory checked before it is taken: a KV cache of 16M rows (244 GiB in f32) is refused at
# once with what it needs and what the GPU has, exit 1, before any weight is uploaded
if want "mem refuse 188m"; then
    log=$out/mem-refuse.err t0=$SECONDS
    ./tools/rlx-bench --config "$root/llama-188m-config.json" --backend cuda --prefill 16 --decode 1 --reps 1 \
        --ctx 16000000 --no-reference >/dev/null 2>"$log"
    rc=$?
    re='^rlx-bench: cuda:0 [^:]*: needs [0-9.]+ GiB \(weights [0-9.]+ [MG]iB \+ KV cache 244\.14 GiB \+ arena [0-9.]+ [KMG]iB( \+ buffers [0-9.]+ [KMG]iB)?\), [0-9.]+ GiB available$'
    ok=FAIL
    [ $rc = 1 ] && [ "$(wc -l <"$log")" = 1 ] && grep -Eq "$re" "$log" && ok=PASS
    row "mem refuse 188m" "$ok rc=$rc $((SECONDS - t0))s $(head -c 300 "$log")"
fi
# tensor parallelism (docs/multi-gpu.md), where 2 or more GPUs are visible: parity of every
# causal-LM fixture over 2 GPUs against 1, then LLaMA-3-8B widths (random bf16 weights)
# decode (batch 1) and prefill-512 on 2 GPUs against 1. NVLink multicast stays off.
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
if [ "$ngpu" -ge 2 ] && { want tp || want tp-nccl || want tp-parity || want tp-speed || want tp-profile; }; then
    tp_env # gpu-env.sh
    row "tp-nccl" "${RLX_NCCL_LIBRARY:-libnccl.so.2 (loader path)}; $ngpu GPUs"
    nvidia-smi topo -m 2>&1 | head -8
    ./tools/rlx-plugins info cuda 2>&1 | grep -A2 'details:'
    run_test tp-parity timeout 240 ./tests/test_tp_gpu
    grep -h 'rel L2\|greedy ids' "$out/tp-parity.log" 2>/dev/null
    cfg=$root/llama-8b-bf16-config.json m8=$tp_model
    if want "tp-speed" && [ -f "$cfg" ]; then
        t0=$SECONDS
        [ -f "$m8/model.safetensors" ] && echo "kept from an earlier run" >"$out/tp-model.log" ||
        python3 "$root/src/tools/make-8b-model.py" "$cfg" "$m8" >"$out/tp-model.log" 2>&1
        row "tp-model" "rc=$? $(tail -1 "$out/tp-model.log") $((SECONDS - t0))s"
        for devs in 0 0,1; do
            log=$out/tp-bench-$devs.json
            t0=$SECONDS
            timeout 150 ./tools/rlx-bench --model "$m8" --backend cuda --devices "$devs" --precision bf16 --prefill 512 \
                --decode 128 --reps 3 --json >"$log" 2>"$log.err"
            row "tp-bench --devices $devs" "rc=$? $(tr -d '\n' <"$log" | head -c 400) $(head -c 300 "$log.err") $((SECONDS - t0))s"
        done
        python3 - "$out/tp-bench-0.json" "$out/tp-bench-0,1.json" <<'PY' | tee -a "$table"
import json, sys
try:
    # the last JSON line (NCCL_DEBUG prints its version on stdout)
    a, b = (json.loads([l for l in open(f) if l.startswith("{")][-1]) for f in sys.argv[1:3])
except Exception as e:
    print("tp-speed                           FAIL (no result: %s)" % e); sys.exit()
for key, want in (("decode_tokens_per_s", 1.6), ("prefill_tokens_per_s", 1.7), ("generate_tokens_per_s", 1.6)):
    if key not in a or key not in b:
        print("%-34s FAIL (no %s: %s)" % ("tp-speed " + key.split("_")[0], key, b.get("generate_unsupported", "?")))
        continue
    x = b[key] / a[key] if a[key] else 0
    print("%-34s %s %.2fx (%.1f -> %.1f tok/s, want >= %.1fx)" % ("tp-speed " + key.split("_")[0],
          "PASS" if x >= want else "FAIL", x, a[key], b[key], want))
print("%-34s %s" % ("tp-memory GiB per GPU", " / ".join("%.2f" % (v / 2**30) for v in b["device_bytes"]) +
      " (1 GPU: %.2f)" % (a["device_bytes"][0] / 2**30)))
PY
        # where a step's time goes on each rank (graphs off, each op timed; rank 0's table first)
        if want "tp-profile"; then
            for devs in 0 0,1; do
                RLX_GPU_PROFILE=1 RLX_TP_PROFILE=1 timeout 150 ./tools/rlx-bench --model "$m8" --backend cuda \
                    --devices "$devs" --precision bf16 --prefill 512 --decode 64 --reps 1 --json \
                    >"$out/tp-profile-$devs.txt" 2>&1
                row "tp-profile --devices $devs" "rc=$?"
                echo "==== tp-profile --devices $devs"; cat "$out/tp-profile-$devs.txt"
            done
        fi
        [ -n "${GPU_CHECK_KEEP:-}" ] || rm -rf "$m8"
    fi
fi
# where the time goes: per-op kernel times and host calls (RLX_GPU_PROFILE, graphs off)
for cfg in llama-188m-config.json llama-1b-config.json; do
    for prec in f32 bf16; do
        name="profile ${cfg%-config.json} $prec"
        want "$name" || continue
        log=$out/profile-${cfg%-config.json}-$prec.txt
        RLX_GPU_PROFILE=1 ./tools/rlx-bench --config "$root/$cfg" --backend cuda --prefill 512 --decode 128 \
            --reps 1 --precision "$prec" --json >"$log" 2>&1
        row "$name" "rc=$?"
        echo "==== $name"; cat "$log"
    done
done
echo "---- table"; cat "$table"
echo "---- first failures"; cat "$out/failures.txt" 2>/dev/null
# the device tool returns at most 8 files: every log in one archive, the table beside it
if [ -n "${OUT:-}" ]; then
    tar -C "$out" -czf /tmp/gpu-check-logs.tgz . &&
        find "$out" -mindepth 1 -maxdepth 1 ! -name gpu-check.txt ! -name failures.txt -exec rm -rf {} + &&
        mv /tmp/gpu-check-logs.tgz "$out/logs.tgz"
fi
