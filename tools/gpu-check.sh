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
# RLX_GPU_ROOT (default /tmp/rlx-gpu, the same for pack and run) keeps two packs apart.
set -u
root=${RLX_GPU_ROOT:-/tmp/rlx-gpu}
mode=${1:-}
dir=${2:-}
[ -n "$mode" ] && [ -n "$dir" ] || { echo "usage: $0 pack|run DIR" >&2; exit 2; }

if [ "$mode" = pack ]; then
    set -e
    top=$(cd "$(dirname "$0")/.." && pwd)
    rm -rf "$root" && mkdir -p "$root/src" "$root/build" "$dir"
    (cd "$top" && git ls-files -z | xargs -0 tar -cf - | tar -C "$root/src" -xf -)
    (cd "$root/src" && autoreconf -fi >/dev/null 2>&1)
    (cd "$root/build" && "$root/src/configure" -q --with-cuda >/dev/null && make -j"$(nproc)" >/dev/null &&
        make -j"$(nproc)" check TESTS= >/dev/null)
    cp "$top/../shared/perf/"llama-*-config.json "$root/" 2>/dev/null || true
    tar -C / --exclude="*.o" --exclude=autom4te.cache -cJf "$dir/rlx-gpu.tar.xz" "${root#/}"
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
export LD_LIBRARY_PATH=$root/build/.libs:$lib:$lib/openblas-pthread:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
cd "$root/build" || exit 1
plugins=$(sed -n "s/^RLX_BUILD_PLUGIN_PATH = //p" Makefile | sed "s|\$(abs_top_builddir)|$root/build|g")
# what make check's AM_TESTS_ENVIRONMENT sets (tests/tests.am)
export RLX_PLUGIN_PATH=$plugins CK_DEFAULT_TIMEOUT=600 RLX_PROFILE_PATH=$root/src/profiles \
    RLX_SRCDIR=$root/src RLX_BUILDDIR=$root/build RLX_FIXTURES=$root/src/tests/fixtures \
    RLX_TEST_BACKEND=cuda
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$out/gpu.txt"
table=$out/gpu-check.txt
: >"$table"
row() { printf '%-34s %s\n' "$1" "$2" | tee -a "$table"; }
run_test() { # name cmd...
    local name=$1; shift
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
    test_flow_edit test_abi_compat test_demo; do
    [ -x "tests/$t" ] && run_test "$t" "tests/$t"
done
# speed: rlx-bench with same-run ceilings, f32 and bf16
for cfg in llama-188m-config.json llama-1b-config.json; do
    for prec in f32 bf16; do
        log=$out/bench-${cfg%-config.json}-$prec.json
        ./tools/rlx-bench --config "$root/$cfg" --backend cuda --prefill 512 --decode 128 --reps 3 \
            --precision "$prec" --json >"$log" 2>"$log.err"
        row "bench ${cfg%-config.json} $prec" "rc=$? $(tr -d '\n' <"$log" | head -c 400)"
    done
done
echo "---- table"; cat "$table"
echo "---- first failures"; cat "$out/failures.txt" 2>/dev/null
