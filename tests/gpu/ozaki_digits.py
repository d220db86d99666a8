"""The Ozaki scheme's exact diagonal sums, computed independently of the library, for the tests of
``gpu.ozaki`` (one copy for every test module that checks the scheme against them)."""

import numpy as np

from gpu import ozaki


def digit_sums(A, B, slices, fmt="fp32", k_block=None):
    """(exact int64 diagonal sums D_d from d = S + 1 down to 2, alpha, e, f), computed independently."""
    p = ozaki.plan(A.shape[0], A.shape[1], B.shape[1], slices, fmt, k_block=k_block)
    e = np.frexp(np.abs(A).max(axis=1))[1].astype(np.int32)
    f = np.frexp(np.abs(B).max(axis=0))[1].astype(np.int32)
    da = [d.astype(np.int64) for d in ozaki.split_values(np, A, e, p.alpha, slices)]
    db = [d.astype(np.int64) for d in ozaki.split_values(np, B.T, f, p.alpha, slices)]
    sums = [sum(da[s - 1] @ db[d - s - 1].T for s in range(max(1, d - slices), min(slices, d - 1) + 1))
            for d in range(slices + 1, 1, -1)]
    return sums, p.alpha, e, f
