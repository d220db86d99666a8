"""CUDA device functions of symmetric residue arithmetic that the residue passes' kernels share (source text only).

``residue_sum`` and ``residue_reduce`` give one symmetric residue of a sum or of an INT32 product (the comparisons
and the float64 quotient of :mod:`gpu.ozaki2.winograd_kernels`); ``word_residue`` and ``residue_small`` the 32-bit
reduction of the Karatsuba and Gauss passes; ``Lanes`` and its functions the packed sums.

**Two residues a word** (``Lanes``). The 16-byte sums of :mod:`gpu.ozaki2.winograd_kernels` work on two residues a
32-bit word, in 16-bit lanes, so that one integer instruction serves two entries (the one-byte form spent about 50
instructions on each entry's four sums, and instruction issue bound its pass). A word of four symmetric residues x
becomes their representatives u in [0, m) in one step, u = x - (256 - m) where x's byte is negative (no byte
borrows: a negative residue's byte is at least 256 - m/2); ``__byte_perm`` spreads two bytes into lanes. A sum u +
v, or a difference u + m - v, lies in [0, 2m), at most 511: adding 2**15 - m sets a lane's bit 15 exactly where it
reaches m, and that bit times m is taken off. The four results are packed back into bytes, and 256 - m is added
where u is above (m - 1) / 2, which leaves the byte of u - m, the symmetric residue. A kernel that defines
``LANES_MIN`` (the level-2 operand pass, whose modulus is a runtime value) reduces instead, on sm_90, to the lesser of
s and s - m modulo 2**16 a lane, one ``VIADDMNMX.U16x2``. Each result is the residue of the same class as NumPy's, so
the bits are NumPy's. On the H200 a fused level's sums of both operands at 15 moduli
took 4.07 ms against the one-byte form's 5.27 at N = 16384 (3.96 against 3.06 TB/s) and 15.4 against 20.5 ms at
32768, bitwise equal (``results/published/scripts/ozaki2_sums_probe.py``, ``h200-ozaki2-sums-probe.json``).
"""

#: The device functions (see the module); ``ROW_GROUPS`` is the vector kernels' loop, rows by ``blockIdx.y`` and
#: groups of a row by threads (grid-stride).
DEVICE = r"""
#define ROW_GROUPS for (long long r = blockIdx.y; r < rows; r += gridDim.y) \
    for (long long g = (long long)blockIdx.x * blockDim.x + threadIdx.x; g < groups; \
         g += (long long)gridDim.x * blockDim.x)
__device__ __forceinline__ signed char symmetric_of(int r, int m) {
    return (signed char)(r > (m - 1) / 2 ? r - m : r);
}
__device__ __forceinline__ signed char residue_sum(int x, int y, int m, int sign) {
    int r = x + sign * y;
    if (r < 0) r += m;
    if (r >= m) r -= m;
    return symmetric_of(r, m);
}
__device__ __forceinline__ signed char residue_reduce64(long long p, int m, double inverse) {
    long long r = p - __double2ll_rn((double)p * inverse) * (long long)m;
    if (r < 0) r += m;
    if (r < 0) r += m;
    if (r >= m) r -= m;
    if (r >= m) r -= m;
    return symmetric_of((int)r, m);
}
__device__ __forceinline__ signed char residue_reduce(int p, int m, double inverse) {
    return residue_reduce64((long long)p, m, inverse);
}
/* p = hi 2^16 + lo (hi = p >> 16 signed, lo in [0, 2^16)) is congruent to hi c16 + lo modulo m (c16 = 2^16 mod m):
   |hi c16 + lo| < 2^15 * 255 + 2^16 < 2^23.01 for any int32 p and m <= 256, in 32-bit integers. */
__device__ __forceinline__ int word_residue(int p, int c16) {
    return (p >> 16) * c16 + (p & 0xFFFF);
}
/* The symmetric residue of x (|x| < 2^24.6: three word residues) modulo m: y = x + off in [0, 2^26) (off a multiple
   of m, 2^25 <= off < 2^25 + m), q = umulhi(y, magic) with magic = ceil(2^32 / m) is floor(y / m) or one more
   (y magic / 2^32 exceeds y / m by less than y / 2^32 < 2^-6), so r = y - q m lies in [-m, m). */
__device__ __forceinline__ signed char residue_small(int x, int m, int off, unsigned magic) {
    const unsigned y = (unsigned)(x + off);
    int r = (int)(y - __umulhi(y, magic) * (unsigned)m);
    if (r < 0) r += m;
    return symmetric_of(r, m);
}
/* Two residues a word, in 16-bit lanes, each as its representative u in [0, m) (``PAIRS`` in the module notes). */
struct Lanes { unsigned m, w, nw, mm, g, h, nm; };
__device__ __forceinline__ Lanes lanes_of(int m) {
    return {(unsigned)m, 256u - m, m - 256u, m * 0x10001u, (0x8000u - m) * 0x10001u, (128u - (m + 1) / 2) * 0x01010101u,
            (0x10000u - m) * 0x10001u};
}
/* The four bytes of x, symmetric residues, as their representatives, one a byte. */
__device__ __forceinline__ unsigned reps4(unsigned x, Lanes k) { return x + ((x >> 7) & 0x01010101u) * k.nw; }
/* Two of reps4's bytes as lanes (sel: 0x4140 its low two, 0x4342 its high two). */
__device__ __forceinline__ unsigned lanes_in(unsigned reps, unsigned sel) { return __byte_perm(reps, 0u, sel); }
/* s in [0, 2m) a lane, less m where it reaches m: bit 15 of s + 2^15 - m, taken off times m; or, in a kernel that
   defines LANES_MIN, on sm_90, the lesser of s and s - m modulo 2^16 a lane (one VIADDMNMX.U16x2: s - m wraps above
   s where s < m). That form holds its constant in a register: kernels whose moduli are compile-time constants keep
   the first, whose constants are immediates (the other took the level-1 sums kernel from 24 to 208 bytes of
   spills at 64 registers). */
__device__ __forceinline__ unsigned lanes_reduce(unsigned s, Lanes k) {
#if defined(LANES_MIN) && __CUDA_ARCH__ >= 900
    return __vminu2(s, __vadd2(s, k.nm));
#else
    return s - (((s + k.g) >> 15) & 0x10001u) * k.m;
#endif
}
__device__ __forceinline__ unsigned lanes_add(unsigned u, unsigned v, Lanes k) { return lanes_reduce(u + v, k); }
__device__ __forceinline__ unsigned lanes_sub(unsigned u, unsigned v, Lanes k) { return lanes_reduce(u + k.mm - v, k); }
/* Two words of lanes (lo's, then hi's) as four symmetric residues, one a byte. */
__device__ __forceinline__ unsigned lanes_out(unsigned lo, unsigned hi, Lanes k) {
    const unsigned u = __byte_perm(lo, hi, 0x6420);
    return u + (((u + k.h) >> 7) & 0x01010101u) * k.w;
}
#define WORDS4(V) (reinterpret_cast<unsigned*>(&(V)))
"""
