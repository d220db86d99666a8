"""CUDA source that scheme II's kernels share (CuPy only, but no CuPy import here: plain text).

``COMMON``: the ``MAGIC`` rounding, the words of a double, and ``residue_word``, the symmetric residue of an
integer held as a double (:mod:`gpu.ozaki2.kernels` says why it is exact); ``for_each_modulus``: the macro that
unrolls a step over a moduli set, each modulus a compile-time constant; ``constants``: a moduli table's CRT
constants as macros (:mod:`gpu.ozaki2.crt_kernels`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .moduli import ModuliTable

COMMON = r"""
#define MAGIC 0x1.8p52
__device__ __forceinline__ double rint_magic(double x) { return __dsub_rn(__dadd_rn(x, MAGIC), MAGIC); }
__device__ __forceinline__ int low_word(double x) { return __double2loint(x); }
__device__ __forceinline__ double from_int(int x)
{
    return __dsub_rn(__hiloint2double(0x43380000, x ^ 0x80000000), 0x1.800008p52);
}
/* The low 32 bits of y - q m, q the nearest integer to y / m, for an integer y with |y| < 2**51 held as a
   double (its low 32 bits given): its low byte is y's symmetric residue as INT8 (see the module). */
template <int M> __device__ __forceinline__ int residue_word(double y, int y_low)
{
    return (int)((unsigned int)y_low - (unsigned int)low_word(fma(y, 1.0 / M, MAGIC)) * (unsigned int)M);
}
/* The symmetric residue of an integer z (|z| < 2^20) modulo M as a double, in integers: residue_word's value (for
   256, z's low byte; for odd M, u - floor(u / M) M - (M - 1) / 2 with u = z + K, K a multiple of M plus (M - 1) / 2
   above |z|, the quotient by one high multiply by ceil(2^32 / M), exact for u < 2^21), in one float64 step where
   residue_word's took four. */
template <int M> __device__ __forceinline__ double small_residue(int z)
{
    static_assert(M == 256 || M % 2 == 1, "a modulus of the tables: 256, or odd");
    if (M == 256) return from_int((signed char)z);
    constexpr unsigned K = M * ((1u << 20) / M + 1) + (M - 1) / 2, RECIP = (unsigned)((1ull << 32) / M + 1);
    const unsigned u = (unsigned)z + K;
    return __dsub_rn(__hiloint2double(0x43380000, (int)((u - __umulhi(u, RECIP) * M) ^ 0x80000000u)),
                     0x1.800008p52 + (M - 1) / 2);
}
"""


def for_each_modulus(moduli: tuple[int, ...]) -> str:
    """The macro that unrolls a step ``F(t, m)`` over the moduli, each a compile-time constant."""
    return "#define FOR_EACH_MODULUS(F) " + " ".join(f"F({t}, {m})" for t, m in enumerate(moduli)) + "\n"


def constants(table: ModuliTable) -> str:
    """The table's constants as macros: ``W_HI_t``, ``W_LO_t``, ``P_HI``, ``P_LO``, ``INV`` (``1.0 / float(M)``, as the
    NumPy twin computes it) and ``EXACT``, each double as its exact hexadecimal literal."""
    lines = [f"#define W_HI_{t} ({float(hi).hex()})\n#define W_LO_{t} ({float(lo).hex()})\n"
             for t, (hi, lo) in enumerate(zip(table.weights_hi, table.weights_lo, strict=True))]
    return "".join(lines) + (f"#define P_HI ({float(table.product_hi).hex()})\n"
                             f"#define P_LO ({float(table.product_lo).hex()})\n"
                             f"#define INV ({(1.0 / float(table.product)).hex()})\n#define EXACT {int(table.exact)}\n")
