#!/usr/bin/env bash
# The Strassen speed-up tables in both power regimes, measured on the GPUs of one host side by side.
#
# Each line of the jobs file is `GPU REGIME SIZES LEVELS CONFIGS` (`gemmlab strassen`'s arguments) or
# `GPU probe SCRIPT` (a Python script run with OUT set). Each GPU runs its lines in order, alone on its
# card (CUDA_VISIBLE_DEVICES), into a database of its own, `grid-gpu<GPU>.sqlite`; a GPU's sweep groups
# are interleaved (DGEMM in every group) and each group is stored as it finishes, so a cut run resumes
# with STATE pointing at the databases an earlier call returned. Every process stops by LIMIT seconds
# (SIGINT, then SIGKILL 15 s later) so the call returns what is stored.
#
# Env: OUT (required), JOBS (the jobs file, required), STATE (folder of grid-gpu*.sqlite to resume; optional),
# LIMIT (seconds, default 540). Writes $OUT/grid.tgz (one file, as the device returns few): per GPU the database,
# its CSV export and each job's JSON and stderr, and the cards' names and power limits.
set -u
: "${OUT:?set OUT to the output folder}" "${JOBS:?set JOBS to the jobs file}"
FINAL=$OUT; OUT=$(mktemp -d); export OUT
LIMIT=${LIMIT:-540}
END=$(( $(date +%s) + LIMIT ))
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=${OMP_NUM_THREADS:-8}
gl() { python3 -m experiments "$@"; }

run_gpu() {
    local gpu=$1 db=$OUT/grid-gpu$1.sqlite n=0
    [ -n "${STATE:-}" ] && [ -f "$STATE/grid-gpu$gpu.sqlite" ] && cp "$STATE/grid-gpu$gpu.sqlite" "$db"
    export CUDA_VISIBLE_DEVICES=$gpu
    while read -r _ kind a b c; do
        n=$((n + 1)); local left=$(( END - $(date +%s) )) tag="$OUT/gpu$gpu-job$n"
        [ "$left" -gt 20 ] || { echo "gpu $gpu: no time left for job $n ($kind $a)"; continue; }
        if [ "$kind" = probe ]; then
            OUT=$OUT timeout -s INT -k 15 "$left" python3 "$a" > "$tag.out" 2> "$tag.err"
        else
            timeout -s INT -k 15 "$left" python3 -m experiments strassen --backend cupy --regime "$kind" \
                --sizes "$a" --levels "$b" --configs "$c" --db "$db" --no-progress --json > "$tag.json" 2> "$tag.err"
        fi
        echo "gpu $gpu job $n ($kind $a $b $c): rc=$? at $(( LIMIT - END + $(date +%s) )) s"
    done < <(awk -v g="$gpu" '$1 == g && $1 !~ /^#/' "$JOBS")
    [ -f "$db" ] || return 0
    python3 -c "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.execute('PRAGMA wal_checkpoint(TRUNCATE)')" "$db"
    gl results export --history --experiment strassen-speedup --db "$db" -o "$OUT/grid-gpu$gpu.csv"
}

for gpu in $(awk '$1 !~ /^#/ && NF {print $1}' "$JOBS" | sort -u); do run_gpu "$gpu" & done
wait
nvidia-smi --query-gpu=index,name,serial,power.limit,clocks.max.sm --format=csv > "$OUT/gpus.csv" 2>&1
tar czf "$FINAL/grid.tgz" -C "$OUT" . && tar tzvf "$FINAL/grid.tgz"
