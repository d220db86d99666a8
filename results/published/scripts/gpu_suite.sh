#!/usr/bin/env bash
# The GPU test suite on a device machine, from a bare image: install the carried wheels (gmpy2, nvmath-python,
# Dask, distributed, dask-cuda and what they need; see .whl), then `pytest -m gpu` over tests/ (or the paths given
# as arguments), with the log, a JUnit XML and the slowest tests under $OUT.
#
# Run from the repository root with .whl carried: OUT=dir bash results/published/scripts/gpu_suite.sh [PYTEST ARGS]
set -u
: "${OUT:?set OUT to the output folder}"
if ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        || exit 1
fi
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm,memory.total --format=csv,noheader | tee "$OUT/device.txt"
python3 -c "import cupy, numpy, scipy; print('cupy', cupy.__version__, 'cuda', cupy.cuda.runtime.runtimeGetVersion(), \
'numpy', numpy.__version__, 'scipy', scipy.__version__)" | tee -a "$OUT/device.txt"
[ $# -gt 0 ] || set -- tests
python3 -m pytest -q -p no:cacheprovider -m gpu --durations=25 --junitxml="$OUT/gpu-junit.xml" "$@" 2>&1 \
    | tee "$OUT/gpu-tests.log" | grep -E "passed|failed|error|FAILED|ERROR" | tail -60
