#!/usr/bin/env bash
# The level="auto" validation: level="auto" timed as itself, interleaved with DGEMM, over the 24 sizes of the published
# sustained H100 sweep (N = 1024-32768, rum+fused), judged against the best measured level.
#
# Starts from nothing on the device: imports results/published/sustained/h100-levels-sustained.csv (calibration,
# in-context calibration, launch overhead, levels 0-4 per size), writes the device profile from that import's
# environment (so level="auto" reads the published calibration whatever this machine's env key), then runs
# `gemmlab levels --auto`: where this machine's env key equals the published one, the levels are stored and each
# size times DGEMM, auto and the executor at auto's level only (about 5-6 minutes).
#
# Env: OUT (output folder, required). S: sizes (default the published 24). LIMIT: seconds for the sweep (560). RESUME_DB: a database from an earlier
# run of this script to continue instead of importing (needed only where the env key differs: then the calibration
# and levels 0-4 are measured here too, about 14 minutes, over two runs of this script).
set -u
: "${OUT:?set OUT to the output folder}"
# nvmath-python is for CUDA graphs only (this sweep runs eagerly); installed where its wheel was carried
ls /tmp/site/nvmath >/dev/null 2>&1 || ! ls .whl/nvmath_python-*.whl >/dev/null 2>&1 || python3 -m pip install -q \
    --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/nvmath_python-*.whl
COMMIT=${GEMMLAB_GIT_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 GEMMLAB_GIT_COMMIT=$COMMIT GEMMLAB_PROFILES=$OUT/profiles
CSV=results/published/sustained/h100-levels-sustained.csv
PUBLISHED_ENV=ff9b113d5690480d
WORK=/tmp/issue13-auto; mkdir -p "$WORK" "$OUT/summary"
DB=$WORK/h100-levels-auto.sqlite
S=${S:-1024,1280,1536,1792,2048,2560,3072,3584,4096,5120,6144,7168,8192,9216,10240,12288,14336,16384,18432,20480,22528,24576,28672,32768}
gl() { python3 -m experiments "$@"; }

# 1. the database: an earlier run's, or the published sweep imported
if [ -n "${RESUME_DB:-}" ] && [ -f "$RESUME_DB" ]; then cp "$RESUME_DB" "$DB"; echo "resuming $RESUME_DB"
elif [ ! -f "$DB" ]; then gl results import "$CSV" --db "$DB" || exit 1; fi

# 2. this machine's env key against the published one (which fields differ, if any)
python3 - "$DB" "$PUBLISHED_ENV" <<'EOF'
import sys
from experiments.core.database import ResultsDB
from experiments.core.environment import KEY_FIELDS, OPTIONAL_KEY_FIELDS, env_key, environment
from gpu.backend import get_backend
here = environment(get_backend("cupy"))
with ResultsDB(sys.argv[1], readonly=True) as db:
    there = db.environment(sys.argv[2])
key = env_key(here)
print(f"env key here {key}, published {sys.argv[2]}: {'same' if key == sys.argv[2] else 'DIFFERENT'}")
for f in KEY_FIELDS + OPTIONAL_KEY_FIELDS:
    if str(here.get(f)) != str(there.get(f)) and not (f == "python" and str(here.get(f))[:4] == str(there.get(f))[:4]):
        print(f"  differs: {f}: here {here.get(f)!r}, published {there.get(f)!r}")
if key != sys.argv[2]:
    print("  -> the stored levels do not stand in here: this run measures the calibration and levels 0-4 too "
          "(about 14 min); run the script again with RESUME_DB=<the .sqlite it copied to OUT> to finish")
EOF

# 3. the device profile from the published (imported) environment's sustained calibration, under this device's name
python3 - "$DB" "$PUBLISHED_ENV" <<'EOF'
import json, shutil, sys
from experiments.core.database import ResultsDB
from experiments.levels.profile import write_profile
from gpu.backend import get_backend
from gpu.profile import backend_profile, device_name, profile_path
with ResultsDB(sys.argv[1], readonly=True) as db:
    path = write_profile(db, sys.argv[2], "results/published/scripts/level_auto.sh", "sustained")
be = get_backend("cupy")
mine = profile_path("cupy", device_name(be))
if mine != path:
    shutil.copy(path, mine)
    print(f"this device is named {device_name(be)!r}: profile copied to {mine}")
table = backend_profile(be)["regimes"]["sustained"]["levels"]["rum+fused"]
print(f"device profile {mine} (from env {sys.argv[2]}, sustained); rum+fused level table: {table[:5]}")
EOF

# 4. the sweep with level="auto" (resumes: what is stored is not measured again)
gl levels --backend cupy --regime sustained --fused --auto --sizes "$S" --db "$DB" --dry-run 2>&1 | grep -A9 "estimated time"
START=$(date +%s)
timeout "${LIMIT:-560}" python3 -m experiments levels --backend cupy --regime sustained --fused --auto --sizes "$S" --db "$DB" \
    --summary "$OUT/summary" --progress --json > "$OUT/levels-auto.json" 2> "$OUT/levels-auto.err"
echo "levels --auto rc=$? after $(( $(date +%s) - START )) s (the dry run's price above)"
tail -c 600 "$OUT/levels-auto.err" | tr '\r' '\n' | tail -3

# 5. where the timeout cut the sweep: the summary from what is stored (measures nothing)
[ -s "$OUT/summary/SUMMARY.md" ] || gl levels --backend cupy --regime sustained --fused --sizes "$S" --db "$DB" \
    --stored levels --summary "$OUT/summary" --json > "$OUT/levels-auto.json" 2>> "$OUT/levels-auto.err"

# 6. the database (checkpointed), the summary, the profile
python3 -c "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.execute('PRAGMA wal_checkpoint(TRUNCATE)'); c.close()" "$DB"
cp "$DB" "$OUT/"; cp "$OUT/summary/SUMMARY.md" "$OUT/SUMMARY.md" 2>/dev/null
gl results export --experiment level-auto -o "$OUT/h100-level-auto.csv" --db "$DB"

# 7. the judgement
python3 - "$OUT/levels-auto.json" <<'EOF'
import json, sys
try:
    found = json.load(open(sys.argv[1]))["summary"].get("level='auto'")
except (OSError, ValueError, KeyError) as exc:
    sys.exit(f"no judgement: {exc}")
if not found:
    sys.exit("no level='auto' row stored")
for p in found["points"]:
    print(f"N = {p['N']:>5}: auto level {p['auto level']} ({p['chosen by']}), {p['auto over DGEMM']:.3f}x DGEMM; "
          f"best level {p['best level']} {p['best over DGEMM'] or float('nan'):.3f}x; auto/best "
          f"{p['auto / best'] or float('nan'):.3f}; executor {p['executor over DGEMM']:.3f}x; "
          f"host per call {p['auto host (us)']:.0f} us (DGEMM {p['DGEMM host (us)']:.0f} us)")
for c in found["checks"]:
    print(f"{'MET' if c['met'] else 'NOT MET' if c['met'] is False else 'not judged'}: {c['target']}: {c['measured']}")
EOF
ls "$OUT"
