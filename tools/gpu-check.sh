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
# to spend less device time while iterating; unset, everything runs.
# GPU_CHECK_INCREMENTAL=1 (pack) rebuilds in the tree of an earlier pack.
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

if [ "$mode" = pack ]; then
    set -e
    top=$(cd "$(dirname "$0")/.." && pwd)
    if [ -n "${RLX_GPU_BUILD:-}" ]; then
        rm -rf "$root/src" && mkdir -p "$root/src" "$dir"
        (cd "$top" && git ls-files -z | xargs -0 tar -cf - | tar -C "$root/src" -xf -)
        (cd "$build" && make -j"$(nproc)" >/dev/null && make -j"$(nproc)" check TESTS= >/dev/null)
    elif [ "${GPU_CHECK_INCREMENTAL:-}" = 1 ] && [ -f "$root/build/Makefile" ]; then
        (cd "$top" && git ls-files -z | xargs -0 tar -cf - | tar -C "$root/src" -xf -)
        (cd "$root/build" && make -j"$(nproc)" >/dev/null && make -j"$(nproc)" check TESTS= >/dev/null)
    else
        rm -rf "$root" && mkdir -p "$root/src" "$root/build" "$dir"
        (cd "$top" && git ls-files -z | xargs -0 tar -cf - | tar -C "$root/src" -xf -)
        (cd "$root/src" && autoreconf -fi >/dev/null 2>&1)
        (cd "$root/build" && "$root/src/configure" -q --with-cuda >/dev/null && make -j"$(nproc)" >/dev/null &&
            make -j"$(nproc)" check TESTS= >/dev/null)
    fi
    cp "$top/../shared/perf/"llama-*-config.json "$root/" 2>/dev/null || true
    parts=("${root#/}")
    [ "${build#"$root"/}" = "$build" ] && parts+=("${build#/}")
    tar -C / --exclude="*.o" --exclude=autom4te.cache --exclude="*.log" --exclude="*.trs" \
        -cJf "$dir/rlx-gpu.tar.xz" "${parts[@]}"
    mkdir -p "$dir/debs"
    (cd "$dir/debs" && apt-get download libjansson4 libhwloc15 libopenblas0-pthread libgfortran5 \
        libquadmath0 libpcre2-8-0 libunistring2 libsubunit0 libpng16-16 >/dev/null 2>&1)
    ls -la "$dir" "$dir/debs"
    exit 0
fi

[ "$mode" = run ] || { echo "usage: $0 pack|run DIR" >&2; exit 2; }
out=${OUT:-/tmp}
tar -C / -xJf "$dir/rlx-gpu.tar.xz"
mkdir -p /tmp/deps && for f in "$dir"/debs/*.deb; do dpkg -x "$f" /tmp/deps; done
lib=/tmp/deps/usr/lib/x86_64-linux-gnu
export LD_LIBRARY_PATH=$build/.libs:$lib:$lib/openblas-pthread:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
cd "$build" || exit 1
plugins=$(sed -n "s/^RLX_BUILD_PLUGIN_PATH = //p" Makefile | sed "s|\$(abs_top_builddir)|$build|g")
# what make check's AM_TESTS_ENVIRONMENT sets (tests/tests.am)
export RLX_PLUGIN_PATH=$plugins CK_DEFAULT_TIMEOUT=600 RLX_PROFILE_PATH=$root/src/profiles \
    RLX_SRCDIR=$root/src RLX_BUILDDIR=$build RLX_FIXTURES=$root/src/tests/fixtures \
    RLX_TEST_BACKEND=cuda
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
    test_flow_edit test_abi_compat test_demo test_batch; do
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
# batched decode: B sequences in one step (aggregate tokens/s), 1B bf16
for B in 1 8 32 64; do
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
