"""N = 32768 with 15 and 16 moduli in any order, at levels 0 and 1, on the GPU: no order runs out of memory.

One process on phi = 1 operands (``ozaki2_as_called.inputs``) calls ``ozaki2.matmul(A, B, moduli=c, level=L)``
(no ``out``: each call allocates its C, as a user's call does) in the order of ``seq`` below: each count after the
other, each level after the other, and both again. Each call is timed to a synchronise (the first of a plan
includes building it and capturing its graph), and its C is fingerprinted (two wrapping sums of the bit patterns
of every 4096th row, from rows 0 and 5): every call of a count must give the bits of its first, at either level.
Writes ``$OUT/order.json`` (the calls; the run's device and commit are added by hand to the published copy).

    CUDA_SCALE_LAUNCH_QUEUES=4x OUT=dir PYTHONPATH=/tmp/site:$PWD python3 results/published/scripts/ozaki2_any_order.py
"""

import json
import os
import sys
import time

import cupy as cp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ozaki2_as_called import inputs  # noqa: E402  (this folder's script: the same inputs)

from gpu import ozaki2  # noqa: E402

SEQ = [(15, 0), (16, 0), (15, 1), (16, 1), (15, 0), (16, 1), (15, 1)]


def main() -> None:
    A, B = inputs(32768)
    seen, out = {}, []
    for count, level in SEQ:
        start = time.perf_counter()
        C = ozaki2.matmul(A, B, moduli=count, level=level)
        cp.cuda.Device().synchronize()
        seconds = time.perf_counter() - start
        sig = [int(C[::4096].view(cp.uint64).sum()), int(C[5::4096].view(cp.uint64).sum())]
        out.append({"moduli": count, "level": level, "s": round(seconds, 3),
                    "same_bits_as_first_of_count": seen.setdefault(count, sig) == sig,
                    "free_gib": round(cp.cuda.runtime.memGetInfo()[0] / 2**30, 1)})
        print(out[-1], flush=True)
        del C
    with open(os.path.join(os.environ.get("OUT", "/tmp"), "order.json"), "w") as fh:
        json.dump(out, fh, indent=1)


if __name__ == "__main__":
    main()
