// An INT8 GEMM whose epilogue writes each product's symmetric residue modulo m as INT8 (a probe, not gemmlab code).
//
// D(M, N) = A(M, K) B(K, N) over k-contiguous INT8 rows (A row-major, B column-major: scheme II's layout; rows lda,
// ldb and ldd elements apart),
// accumulated exactly in INT32 by CUTLASS 3's Hopper warp-specialized kernels (TMA, wgmma), then reduced modulo
// `modulus` into [-(m/2), (m-1)/2] in the epilogue (MOD=1 by `%`, MOD=2 by Barrett's reduction, 3 <= m <= 256),
// as INT8 or, where WIDE is defined, INT16; or stored as INT32 (MOD=0, the same kernel's GEMM
// quality alone). One variant per compilation, named NAME and chosen by TILE_M/N/K, CLUSTER_M/N and PINGPONG, and
// where defined by the persistent tile scheduler's SWIZZLE (most swizzle) and RASTER (1 along M, 2 along N; CUTLASS's
// heuristic otherwise);
// ozaki2_modular_gemm.sh builds them all into one shared library for ozaki2_modular_epilogue.py (ctypes).
#include <cstdint>
#include <cuda_runtime.h>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/fusion/sm90_visitor_compute_tma_warpspecialized.hpp"
#include "cutlass/epilogue/thread/activation.h"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/util/packed_stride.hpp"

using namespace cute;

struct ModArguments {
  int32_t modulus = 256;
  int32_t magic = 16777216;  // ceil(2^32 / modulus), for BarrettResidue
};

// The symmetric residue of an INT32 product; `%` keeps the dividend's sign, so one correction each way.
template <class T>
struct SymmetricResidue {
  using Arguments = ModArguments;
  CUTLASS_HOST_DEVICE T operator()(T const& x, Arguments const& a) const {
    int32_t r = x % a.modulus;
    r = r > (a.modulus - 1) / 2 ? r - a.modulus : r;
    return r < -(a.modulus / 2) ? r + a.modulus : r;
  }
};

template <class T, int N>
struct SymmetricResidue<cutlass::Array<T, N>> {
  using Arguments = ModArguments;
  CUTLASS_HOST_DEVICE cutlass::Array<T, N> operator()(cutlass::Array<T, N> const& x, Arguments const& a) const {
    cutlass::Array<T, N> out;
    SymmetricResidue<T> op;
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < N; ++i) out[i] = op(x[i], a);
    return out;
  }
};

// The same residue by Barrett's reduction (MOD=2): no division, integer multiplies and selects only. The signed
// high product q = floor(x * magic / 2^32) is floor(x / m) within one each way for |x| < 2^31, so x - q m lies in
// [-m, 2m) and three selects bring it into [-(m/2), (m-1)/2] exactly.
template <class T>
struct BarrettResidue {
  using Arguments = ModArguments;
  CUTLASS_HOST_DEVICE T operator()(T const& x, Arguments const& a) const {
#ifdef __CUDA_ARCH__
    int32_t q = __mulhi(x, a.magic);
#else
    int32_t q = static_cast<int32_t>((static_cast<int64_t>(x) * a.magic) >> 32);
#endif
    int32_t r = x - q * a.modulus;
    int32_t hi = (a.modulus - 1) / 2;
    r = r > hi ? r - a.modulus : r;
    r = r > hi ? r - a.modulus : r;
    r = r < -(a.modulus / 2) ? r + a.modulus : r;
#ifdef WIDE
    return r & 0xFFFF;
#else
    return r;
#endif
  }
};

template <class T, int N>
struct BarrettResidue<cutlass::Array<T, N>> {
  using Arguments = ModArguments;
  CUTLASS_HOST_DEVICE cutlass::Array<T, N> operator()(cutlass::Array<T, N> const& x, Arguments const& a) const {
    cutlass::Array<T, N> out;
    BarrettResidue<T> op;
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < N; ++i) out[i] = op(x[i], a);
    return out;
  }
};

using TileShape = Shape<Int<TILE_M>, Int<TILE_N>, Int<TILE_K>>;
using ClusterShape = Shape<Int<CLUSTER_M>, Int<CLUSTER_N>, _1>;
#if PINGPONG
using MainSchedule = cutlass::gemm::KernelTmaWarpSpecializedPingpong;
using EpiSchedule = cutlass::epilogue::TmaWarpSpecialized;
#else
using MainSchedule = cutlass::gemm::KernelTmaWarpSpecializedCooperative;
using EpiSchedule = cutlass::epilogue::TmaWarpSpecializedCooperative;
#endif
constexpr auto Round = cutlass::FloatRoundStyle::round_to_nearest;
#if MOD
#ifdef WIDE
using ElementD = uint16_t;  // TMA has no signed 16-bit format: the residue's two's-complement bits
#else
using ElementD = int8_t;
#endif
#if MOD == 2
template <class T>
using Residue = BarrettResidue<T>;
#else
template <class T>
using Residue = SymmetricResidue<T>;
#endif
using Fusion = cutlass::epilogue::fusion::Sm90EVT<
    cutlass::epilogue::fusion::Sm90Compute<Residue, ElementD, int32_t, Round>,
    cutlass::epilogue::fusion::Sm90AccFetch>;
#else
using ElementD = int32_t;
using Fusion = cutlass::epilogue::fusion::Sm90EVT<
    cutlass::epilogue::fusion::Sm90Compute<cutlass::epilogue::thread::Identity, int32_t, int32_t, Round>,
    cutlass::epilogue::fusion::Sm90AccFetch>;
#endif
constexpr int AlignD = 16 / sizeof(ElementD);

using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
    cutlass::epilogue::collective::EpilogueTileAuto, int32_t, int32_t,
    void, cutlass::layout::RowMajor, AlignD, ElementD, cutlass::layout::RowMajor, AlignD,
    EpiSchedule, Fusion>::CollectiveOp;

using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp,
    int8_t, cutlass::layout::RowMajor, 16, int8_t, cutlass::layout::ColumnMajor, 16, int32_t,
    TileShape, ClusterShape,
    cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
    MainSchedule>::CollectiveOp;

using Kernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, Mainloop, Epilogue>;
using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;

extern "C" int NAME(const void* A, const void* B, void* D, int M, int N, int K, int64_t lda, int64_t ldb,
                    int64_t ldd, int modulus, void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  using SA = typename Kernel::StrideA;
  using SB = typename Kernel::StrideB;
  using SC = typename Kernel::StrideC;
  using SD = typename Kernel::StrideD;
  SA sa = cutlass::make_cute_packed_stride(SA{}, make_shape(M, K, 1));
  SB sb = cutlass::make_cute_packed_stride(SB{}, make_shape(N, K, 1));
  SC sc = cutlass::make_cute_packed_stride(SC{}, make_shape(M, N, 1));
  SD sd = cutlass::make_cute_packed_stride(SD{}, make_shape(M, N, 1));
  get<0>(sa) = lda;
  get<0>(sb) = ldb;
  get<0>(sd) = ldd;
  typename Gemm::Arguments args{
      cutlass::gemm::GemmUniversalMode::kGemm,
      {M, N, K, 1},
      {static_cast<const int8_t*>(A), sa, static_cast<const int8_t*>(B), sb},
      {{}, nullptr, sc, static_cast<ElementD*>(D), sd}};
#if MOD
  int32_t magic = static_cast<int32_t>(((int64_t{1} << 32) + modulus - 1) / modulus);
  args.epilogue.thread = {{}, ModArguments{modulus, magic}};
#endif
#ifdef SWIZZLE
  args.scheduler.max_swizzle_size = SWIZZLE;
#endif
#ifdef RASTER
  using Raster = cutlass::gemm::kernel::detail::RasterOrderOptions;
  args.scheduler.raster_order = RASTER == 1 ? Raster::AlongM : Raster::AlongN;
#endif
  Gemm gemm;
  if (gemm.can_implement(args) != cutlass::Status::kSuccess) return 1;
  if (Gemm::get_workspace_size(args) > workspace_bytes) return 2;
  if (gemm.initialize(args, workspace, stream) != cutlass::Status::kSuccess) return 3;
  return gemm.run(stream) == cutlass::Status::kSuccess ? 0 : 4;
}
