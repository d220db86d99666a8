#!/usr/bin/env bash
# Build ozaki2_modular_gemm.cu's variants into one shared library (a probe's, not gemmlab's): CUTLASS 3 headers
# under $CUTLASS (include/ and tools/util/include/), nvcc 13 for sm_90a. Each variant is NAME:TILE_M:TILE_N:TILE_K:
# CLUSTER_M:CLUSTER_N:PINGPONG:MOD, then optionally more defines as NAME=VALUE joined by commas (SWIZZLE=4,RASTER=1);
# they compile JOBS at a time (default all).
#   CUTLASS=dir OUTLIB=libozaki2_modgemm.so bash results/published/scripts/ozaki2_modular_gemm.sh
set -eu
: "${CUTLASS:?set CUTLASS to a CUTLASS checkout}" "${OUTLIB:?set OUTLIB to the library to write}"
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
VARIANTS=${VARIANTS:-"mod_128x256_c21:128:256:128:2:1:0:1 mod_256x128_c12:256:128:128:1:2:0:1 \
mod_128x256_c11:128:256:128:1:1:0:1 i32_128x256_c21:128:256:128:2:1:0:0 i32_128x256_c11:128:256:128:1:1:0:0 \
i32_256x128_c12:256:128:128:1:2:0:0"}
flags="-std=c++17 -O3 -DNDEBUG -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -diag-suppress 20012 \
-I$CUTLASS/include -I$CUTLASS/tools/util/include -Xcompiler -fPIC"
for v in $VARIANTS; do
    IFS=: read -r name tm tn tk cm cn pp mod extra <<< "$v"
    defines=""
    for d in ${extra//,/ }; do defines="$defines -D$d"; done
    # shellcheck disable=SC2086
    nvcc $flags -DNAME="$name" -DTILE_M="$tm" -DTILE_N="$tn" -DTILE_K="$tk" -DCLUSTER_M="$cm" -DCLUSTER_N="$cn" \
        -DPINGPONG="$pp" -DMOD="$mod" $defines -c -o "$work/$name.o" "$here/ozaki2_modular_gemm.cu" &
    while [ "$(jobs -rp | wc -l)" -ge "${JOBS:-999}" ]; do wait -n; done
done
wait
nvcc -shared --cudart static -o "$OUTLIB" "$work"/*.o
rm -rf "$work"
