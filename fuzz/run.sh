#!/usr/bin/env bash
# Runs each fuzz target in turn with cargo-fuzz (nightly Rust, `cargo install cargo-fuzz`),
# one process at a time, for a fixed time, a fixed number of executions, or both.
#
#   fuzz/run.sh                      # every target, 60 s each
#   fuzz/run.sh -t 600 differential  # one target, 10 minutes
#   fuzz/run.sh -n 1000000           # every target, one million executions each
#   fuzz/run.sh -n 2000000 -t 1800 capi  # whichever limit comes first
#
# New inputs go to fuzz/found/<target>/ (not in git); the seeds in fuzz/corpus/<target>/
# are read, never written. A crash leaves its input in fuzz/artifacts/<target>/: fix the
# bug, then copy the input into fuzz/corpus/<target>/ so the stable replay keeps it.
# libFuzzer's last lines give the executions reached ("Done N runs in S second(s)").
set -euo pipefail
cd "$(dirname "$0")"

limit=()
while getopts "t:n:" opt; do
    case $opt in
        t) limit+=(-max_total_time="$OPTARG") ;;
        n) limit+=(-runs="$OPTARG") ;;
        *) echo "usage: $0 [-t seconds] [-n executions] [target...]" >&2; exit 2 ;;
    esac
done
shift $((OPTIND - 1))
if [ ${#limit[@]} -eq 0 ]; then
    limit=(-max_total_time=60)
fi
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    targets=(npy_reader key_and_shapes differential capi)
fi

for target in "${targets[@]}"; do
    extra=()
    if [ "$target" != npy_reader ]; then
        # The library targets instrument Cranelift too (about 100,000 features), and the
        # entropic schedule's per-feature bookkeeping then costs more than the run
        # (2 to 3x fewer executions).
        extra=(-entropic=0)
    fi
    if [ "$target" = differential ] || [ "$target" = capi ]; then
        # Their kernel caches keep every key met (capi has two: the C ABI's and the Rust
        # API's; about 0.1 MB a kernel under AddressSanitizer), so allow them more than
        # the default 2 GB.
        extra+=(-rss_limit_mb=6144)
    fi
    mkdir -p "found/$target"
    echo "== $target: ${limit[*]} ${extra[*]}"
    cargo +nightly fuzz run "$target" "found/$target" "corpus/$target" -- \
        "${limit[@]}" "${extra[@]}" -print_final_stats=1
done
