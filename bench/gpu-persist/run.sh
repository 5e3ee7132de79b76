#!/usr/bin/env bash
# run.sh: build persist.cu for sm_90 and compare v1 (--stream regs) with v2 (--stream ring, the
# shared-memory weight ring fed by bulk TMA) on both shapes (about 2-3 minutes on an H100).
# Run from the directory holding persist.cu; needs only CUDA (nvcc at /usr/local/cuda/bin).
# Builds (in parallel): default, -DPHASE_TIMING, -DNTHREADS=256 (8 consumer warps + producer).
# Per shape: v1 at its best (--pf 0), the ring at 4 (stages x stage) settings, the 256-thread
# ring, then PHASE_TIMING of the fastest ring setting and of v1. Every run checks its logits
# against the reference; the JSON lines are gathered at the end (also in build/runs.log).
set -uo pipefail
[ -f persist.cu ] || cd "$(dirname "$0")" || exit 1 # the current directory, else the script's
[ -f persist.cu ] || { echo "no persist.cu here" >&2; exit 1; }
NVCC=${NVCC:-/usr/local/cuda/bin/nvcc}
B=build
mkdir -p "$B"
: >"$B/runs.log"
FLAGS=(-std=c++17 -O3 -gencode "arch=compute_90,code=sm_90" -Xcompiler "-Wall,-Wextra" -Xptxas -v)

echo "== GPU"
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem,power.limit --format=csv,noheader 2>/dev/null || true

echo "== build"
build() { # name, extra flags...
    local name=$1
    shift
    "$NVCC" "${FLAGS[@]}" "$@" -o "$B/$name" persist.cu >"$B/$name.log" 2>&1
    echo $? >"$B/$name.rc"
}
t0=$(date +%s)
build persist &
build persist_pt -DPHASE_TIMING &
build persist_256 -DNTHREADS=256 &
wait
echo "built in $(($(date +%s) - t0)) s"
for n in persist persist_pt persist_256; do
    rc=$(cat "$B/$n.rc")
    warn=$(grep -ci "warning" "$B/$n.log")
    echo "$n: rc $rc, $warn warnings; k_persist<barrier, ring> (0 cg, 1 counter, 2 flags; b0 v1, b1 ring):"
    # ptxas: registers, spill bytes, static shared memory of each instantiation
    awk '/Function properties for _Z9k_persist/ {
            n = $NF; sub(/_Z9k_persistILi/, "", n); sub(/EEv6Params/, "", n); sub(/ELb/, ",", n)
            getline; st = $5; ld = $9
            getline; for (i = 1; i <= NF; i++) { if ($i == "registers,") r = $(i - 1); if ($i == "smem") sm = $(i - 2) }
            printf "    <%s>: %s registers, spill %s/%s B, static smem %s B\n", n, r, st, ld, sm }' "$B/$n.log"
    if [ "$rc" != 0 ]; then
        tail -20 "$B/$n.log"
    fi
done
[ "$(cat "$B/persist.rc")" = 0 ] || exit 1

echo
echo "== host checks (work split, v1 prefetch plan, v2 ring plan)"
for shape in 1b 188m; do
    "$B/persist" --shape "$shape" --host-check 132 --stages 8 --stage-kb 16 | grep check
    "$B/persist" --shape "$shape" --host-check 132 --stages 6 --stage-kb 24 | grep "ring check"
done

fails=0
run() { # a run's whole output, then its exit code (3: the logits check failed)
    echo
    echo "== $*"
    timeout 60 "$@" 2>&1 | tee -a "$B/runs.log"
    local rc=${PIPESTATUS[0]}
    echo "rc $rc"
    [ "$rc" = 0 ] || fails=$((fails + 1))
}
# us_per_token of the counter barrier in the last JSON line of runs.log (empty if none)
last_counter_us() { grep '^{' "$B/runs.log" | tail -1 | grep -o '"counter":{[^}]*' | grep -o '"us_per_token":[0-9.]*' | cut -d: -f2; }

RINGS=("8 16" "4 32" "6 24" "10 16") # stages, KB a stage (all fit 227 KB with the 1b shape's other buffers)
t0=$(date +%s)
for shape in 1b 188m; do
    run "$B/persist" --shape "$shape" --stream regs --pf 0 --ref-tokens 20 # v1 at its best
    best=""
    best_us=""
    for r in "${RINGS[@]}"; do
        set -- $r
        run "$B/persist" --shape "$shape" --stream ring --stages "$1" --stage-kb "$2" --ref-tokens 20
        us=$(last_counter_us)
        if [ -n "$us" ] && { [ -z "$best_us" ] || awk -v a="$us" -v b="$best_us" 'BEGIN { exit !(a < b) }'; }; then
            best="$r"
            best_us="$us"
        fi
    done
    [ -x "$B/persist_256" ] && run "$B/persist_256" --shape "$shape" --stream ring --stages 8 --stage-kb 16 --ref-tokens 20
    [ -n "$best" ] || best="8 16"
    echo
    echo "== $shape: fastest ring setting (counter): $best ($best_us us/token)"
    set -- $best
    if [ -x "$B/persist_pt" ]; then
        run "$B/persist_pt" --shape "$shape" --stream ring --stages "$1" --stage-kb "$2" --barrier counter --ref-tokens 20
        run "$B/persist_pt" --shape "$shape" --stream regs --pf 0 --barrier counter --ref-tokens 20
    fi
done
echo "ran in $(($(date +%s) - t0)) s, $fails runs failed"

echo
echo "== JSON lines"
grep '^{' "$B/runs.log"
[ "$fails" = 0 ]
