#!/bin/bash
# Runs every libFuzzer harness for SECONDS on a corpus seeded from committed files (the
# fixtures, the bad-input corpus and its fuzz regressions, the profiles, the example
# flows; none for the tokenizer cache reader) and prints each one's executions. Exit 1 when a harness finds a crash, a leak,
# a sanitizer report or a timeout (its input is kept under WORKDIR).
# usage: fuzz/run.sh BUILDDIR [SECONDS] [WORKDIR]   (after `make fuzz` in BUILDDIR)
set -u
src=$(cd "$(dirname "$0")/.." && pwd)
build=${1:?usage: fuzz/run.sh BUILDDIR [SECONDS] [WORKDIR]}
secs=${2:-60}
work=${3:-$(mktemp -d /tmp/rlx-fuzz.XXXXXX)}
build=$(cd "$build" && pwd) || exit 1

seeds() { # harness -> the committed files that seed it
    case $1 in
    safetensors) ls "$src"/tests/bad-inputs/*/model.safetensors "$src"/tests/bad-inputs/inputs/*.safetensors ;;
    config) ls "$src"/tests/fixtures/*/config.json "$src"/tests/fixtures/configs-4x/*.json \
        "$src"/tests/bad-inputs/*/config.json "$src"/tests/bad-inputs/fuzz-regressions/config-* \
        "$src"/models/*/config.json ;;
    profile) ls "$src"/profiles/*.rlx.json ;;
    tokenizer) ls "$src"/tests/fixtures/tokenizers/*.json "$src"/models/*/tokenizer.json \
        "$src"/tests/bad-inputs/fuzz-regressions/tokenizer-* ;;
    flow) ls "$src"/examples/flows/*.json ;;
    tokcache) ;; # cache images are made at run time: libFuzzer starts from nothing
    esac 2>/dev/null
}

# one harness: its corpus, its run; the exit status in $work/fuzz_$h.rc
run_one() {
    local h=$1 bin=$build/fuzz/fuzz_$1 corpus=$work/corpus-$1
    [ -x "$bin" ] || { echo 127 >"$work/fuzz_$h.rc"; return; }
    mkdir -p "$corpus"
    seeds "$h" | while read -r f; do cp "$f" "$corpus/seed-$(echo "${f#"$src"/}" | tr / _)"; done
    ls "$corpus" | wc -l >"$work/fuzz_$h.seeds"
    (cd "$work" && "$bin" -max_total_time="$secs" -timeout=10 -rss_limit_mb=4096 -max_len=262144 \
        -print_final_stats=1 -artifact_prefix="$work/fuzz_$h-" "$corpus" >"$work/fuzz_$h.log" 2>&1)
    echo $? >"$work/fuzz_$h.rc"
}

harnesses="safetensors config profile tokenizer flow tokcache"
# side by side when there is a core for each (single-threaded harnesses), else in turn
if [ "$(nproc 2>/dev/null || echo 1)" -ge 6 ]; then
    for h in $harnesses; do run_one "$h" & done
    wait
else
    for h in $harnesses; do run_one "$h"; done
fi

failed=0
total=0
for h in $harnesses; do
    rc=$(cat "$work/fuzz_$h.rc")
    if [ "$rc" = 127 ]; then
        echo "fuzz_$h: not built (make fuzz)"
        failed=1
        continue
    fi
    n=$(cat "$work/fuzz_$h.seeds")
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/fuzz_$h.log" | tail -n 1)
    total=$((total + ${execs:-0}))
    if [ "$rc" -ne 0 ]; then
        echo "fuzz_$h: FAILED (exit $rc) after ${execs:-?} executions from $n seeds; log and input in $work"
        grep -m 5 -E 'ERROR|SUMMARY|runtime error|Test unit written' "$work/fuzz_$h.log"
        failed=1
    else
        echo "fuzz_$h: ${execs:-?} executions in $secs s from $n seeds, no findings"
    fi
done
echo "fuzz: $total executions in all"
exit $failed
