#!/bin/bash
# A two-GPU diagnostic of the Dask front-end (see engine_pair.py). From the repository root on the two-GPU machine:
#   PYTHONPATH=$PWD N=49152 REPS=5 bash results/published/scripts/dask_2gpu_diag/engine_pair.sh
# draws A, B and C (uniform [0, 1): a constant fill draws less power and skips the 700 W cap), then runs
# half 0 alone on GPU 0, both halves at once (one process per GPU), and the whole product on GPU 0.
set -u
here=$(dirname "$0")
mkdir -p /dev/shm/diag
python3 - <<'PY'
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

n = int(os.environ["N"])
for name in "abc":
    x = np.lib.format.open_memmap(f"/dev/shm/diag/{name}.npy", mode="w+", dtype=np.float64, shape=(n, n))
    with ThreadPoolExecutor(32) as pool:
        list(pool.map(lambda r: np.random.default_rng(r).random(out=x[r:r + 512]), range(0, n, 512)))
    x.flush()
PY
job() { CUDA_VISIBLE_DEVICES=$1 python3 "$here/engine_pair.py" "$2" "$3" "$4" "$5"; }
step() { rm -f /dev/shm/diag/ready.*; }
step; job 0 engine 0 1 alone
step; job 0 engine 0 2 pair & job 1 engine 1 2 pair; wait
step; job 0 engine all 1 whole
rm -rf /dev/shm/diag
