#!/usr/bin/env bash
# The scheme II benchmark's timing groups against one group of every configuration: `gemmlab ozaki2` at N = 4096 with
# fast scaling and 8..20 moduli (13 configurations and the defaults), errors off, three times in turn: in the groups the
# plan cache holds (GROUP_PLANS = 7, the default), in one group (GROUP_PLANS = 100: the benchmark before its groups,
# whose round-by-round calls found their plans evicted from the cache of 8), then in groups again. Each run's
# `--json` output goes to $OUT/<run>.json (new1, old, new2).
#
# Run on the device from the repository root: OUT=dir PYTHONPATH=$PWD bash results/published/scripts/ozaki2_bench_groups.sh
set -u
: "${OUT:?set OUT to the output folder}"
methods=$(python3 -c "print(','.join(f'ozaki2-fast-{c}' for c in range(8, 21)))")
run() {
    python3 -c "
import sys
from experiments.ozaki2 import timing
timing.GROUP_PLANS = $2
from experiments.cli import main
sys.exit(main(sys.argv[1:]))" ozaki2 --backend cupy --regime sustained --phi 1 --no-errors --json --no-progress \
        --sizes 4096 --methods "$methods" --db "/tmp/$1.sqlite" > "$OUT/$1.json"
}
run new1 7 && run old 100 && run new2 7
