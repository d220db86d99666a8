"""Complex products modulo a Gaussian modulus as two real ones (scheme ``"2m"`` of :mod:`gpu.ozaki2.complex`).

Where -1 has a square root j modulo m (m odd, every prime factor 1 mod 4: :data:`gpu.ozaki2.moduli.GAUSSIAN_MODULI`),
the ring Z_m[i] is two copies of Z_m: a + b i -> (a + j b, a - j b) is a ring isomorphism, since (a + j b)(c + j d)
= (ac - bd) + j (ad + bc) when j^2 = -1, and 2 and j are units. So, modulo m, with U = Ar' + j Ai', V = Ar' - j Ai'
and the same for B,

    P = U_A U_B = Re C' + j Im C',   Q = V_A V_B = Re C' - j Im C',
    Re C' = (P + Q) / 2,   Im C' = (P - Q) / (2 j),

two INT8 products where Karatsuba takes three and the definition four, and the residues of Re C' and Im C' come
out exact, as theirs do. The operands' pairs are formed in place of their parts' residues (:meth:`split`: one pass
per modulus over each operand's two planes), and both parts come from the two INT32 products in one pass
(:meth:`parts`), written into the CRT's planes.

The NumPy operations here and the CUDA passes of :mod:`gpu.ozaki2.gauss_kernels` give the same residues (each is
the unique symmetric residue of an exact integer).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..backend import Array, Backend, register_ops
from .moduli import imaginary_unit
from .residues import symmetric
from .winograd import into

FAMILY = "ozaki2-gauss"


def constants(m: int) -> tuple[int, int, int]:
    """(j, h, g) modulo m, as symmetric residues: j the imaginary unit (:func:`imaginary_unit`), h = 1/2 and
    g = 1/(2 j), the factors that take P + Q and P - Q to Re C' and Im C'."""
    j = imaginary_unit(m)
    h, g = pow(2, -1, m), pow(2 * j, -1, m)
    return j, int(symmetric(np.int64(h), m)), int(symmetric(np.int64(g), m))


class HostGaussOps:
    """The two passes on NumPy (exact in 64-bit integers)."""

    def __init__(self, backend: Backend | None = None) -> None:
        self.backend = backend

    def split(self, x: Array, y: Array, m: int, out: tuple[Array, Array] | None = None) -> tuple[Array, Array]:
        """The symmetric residues of x + j y and x - j y modulo m (x, y: symmetric residues, INT8), into ``out``
        where given (it may be (x, y) themselves)."""
        j = constants(m)[0]
        x64, jy = x.astype(np.int64), j * y.astype(np.int64)
        return into(out, (symmetric((x64 + jy) % m, m), symmetric((x64 - jy) % m, m)))

    def parts(self, P: Array, Q: Array, m: int, out: tuple[Array, Array] | None = None) -> tuple[Array, Array]:
        """The symmetric residues of (P + Q) / 2 and (P - Q) / (2 j) modulo m (INT32 products P = U_A U_B and
        Q = V_A V_B in): Re C' and Im C', into ``out``'s two INT8 arrays where given."""
        _, h, g = constants(m)
        P64, Q64 = P.astype(np.int64), Q.astype(np.int64)
        return into(out, (symmetric((P64 + Q64) % m * h % m, m), symmetric((P64 - Q64) % m * g % m, m)))


def ops(backend: Backend) -> Any:
    """The two passes of ``backend``."""
    return backend.ops(FAMILY)


register_ops(FAMILY, "numpy", HostGaussOps)
register_ops(FAMILY, "cupy", "gpu.ozaki2.gauss_kernels:CudaGaussOps")
