// INT8 x INT8 -> INT32 GEMMs on CUTLASS 3's Hopper warp-specialized kernels (TMA loads, wgmma): gemmlab's
// cutlass_int8 route (gpu/backend/cutlass_int8.py), built by `gemmlab kernels --build`.
//
// D(M, N) = A(M, K) B(N, K)^T over k-contiguous INT8 rows (A's rows lda elements apart, B's ldb), D row-major with
// rows ldd apart, accumulated exactly in INT32: the bits of any exact INT8 GEMM. NAME writes D as INT32; NAME_res
// writes each entry's symmetric residue modulo `modulus` (3 to 256), in [-(m/2), (m-1)/2], as INT8: scheme II's
// products as its CRT reads them, a quarter of the bytes to write and read back. NAME_res takes a batch of L such
// products in one launch (operand and result i at i times their batch strides, in elements, from A, B and D): the
// persistent kernel's tiles then run on with no tail wave and no ramp between the products. One kernel shape per
// compilation, named NAME and shaped by TILE_M/N/K, CLUSTER_M/N and PINGPONG (the choice is data:
// cutlass_int8.KERNELS). Returns 0 when issued on `stream`, 1 when CUTLASS cannot take the shape or alignment, 2
// when the workspace is too small, 3 or 4 when initializing or launching fails; nothing is issued unless it
// returns 0.
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

struct ModArguments {
  int32_t modulus = 256;
  int32_t magic = 16777216;  // ceil(2^32 / modulus)
};

// The symmetric residue by Barrett's reduction, with no division (the `%` of a runtime modulus cost the GEMM about
// 1% more on the H200): for |x| < 2^31 the signed high product q = floor(x magic / 2^32) is floor(x / m) or one
// off either way, so x - q m lies in [-m, 2m) and three selects bring it into [-(m/2), (m-1)/2].
template <class T>
struct Residue {
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
    return r < -(a.modulus / 2) ? r + a.modulus : r;
  }
};

template <class T, int N>
struct Residue<cutlass::Array<T, N>> {
  using Arguments = ModArguments;
  CUTLASS_HOST_DEVICE cutlass::Array<T, N> operator()(cutlass::Array<T, N> const& x, Arguments const& a) const {
    cutlass::Array<T, N> out;
    Residue<T> op;
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < N; ++i) out[i] = op(x[i], a);
    return out;
  }
};

template <class ElementD, class Fusion>
struct Config {
  static constexpr int AlignD = 16 / sizeof(ElementD);
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
};

using Int32Out = Config<int32_t, cutlass::epilogue::fusion::Sm90EVT<
    cutlass::epilogue::fusion::Sm90Compute<cutlass::epilogue::thread::Identity, int32_t, int32_t, Round>,
    cutlass::epilogue::fusion::Sm90AccFetch>>;
using ResidueOut = Config<int8_t, cutlass::epilogue::fusion::Sm90EVT<
    cutlass::epilogue::fusion::Sm90Compute<Residue, int8_t, int32_t, Round>,
    cutlass::epilogue::fusion::Sm90AccFetch>>;

template <class Cfg, class Setup>
int run(const void* A, const void* B, void* D, int M, int N, int K, int L, int64_t lda, int64_t ldb, int64_t ldd,
        const int64_t* batch, Setup setup, void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  using Kernel = typename Cfg::Kernel;
  using Gemm = typename Cfg::Gemm;
  using ElementD = typename Kernel::ElementD;
  using SA = typename Kernel::StrideA;
  using SB = typename Kernel::StrideB;
  using SC = typename Kernel::StrideC;
  using SD = typename Kernel::StrideD;
  SA sa = cutlass::make_cute_packed_stride(SA{}, make_shape(M, K, L));
  SB sb = cutlass::make_cute_packed_stride(SB{}, make_shape(N, K, L));
  SC sc = cutlass::make_cute_packed_stride(SC{}, make_shape(M, N, L));
  SD sd = cutlass::make_cute_packed_stride(SD{}, make_shape(M, N, L));
  get<0>(sa) = lda;
  get<0>(sb) = ldb;
  get<0>(sd) = ldd;
  if (L > 1) {
    get<2>(sa) = batch[0];
    get<2>(sb) = batch[1];
    get<2>(sd) = batch[2];
  }
  typename Gemm::Arguments args{
      cutlass::gemm::GemmUniversalMode::kGemm,
      {M, N, K, L},
      {static_cast<const int8_t*>(A), sa, static_cast<const int8_t*>(B), sb},
      {{}, nullptr, sc, static_cast<ElementD*>(D), sd}};
  setup(args);
  Gemm gemm;
  if (gemm.can_implement(args) != cutlass::Status::kSuccess) return 1;
  if (Gemm::get_workspace_size(args) > workspace_bytes) return 2;
  if (gemm.initialize(args, workspace, stream) != cutlass::Status::kSuccess) return 3;
  return gemm.run(stream) == cutlass::Status::kSuccess ? 0 : 4;
}

#define PASTE_(a, b) a##b
#define PASTE(a, b) PASTE_(a, b)

extern "C" int NAME(const void* A, const void* B, void* D, int M, int N, int K, int64_t lda, int64_t ldb,
                    int64_t ldd, void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  return run<Int32Out>(A, B, D, M, N, K, 1, lda, ldb, ldd, nullptr, [](auto&) {}, workspace, workspace_bytes,
                       stream);
}

extern "C" int PASTE(NAME, _res)(const void* A, const void* B, void* D, int M, int N, int K, int L, int64_t lda,
                                 int64_t ldb, int64_t ldd, int64_t batch_a, int64_t batch_b, int64_t batch_d,
                                 int modulus, void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  if (modulus < 3 || modulus > 256 || L < 1) return 1;
  const int64_t batch[3] = {batch_a, batch_b, batch_d};
  const int32_t magic = static_cast<int32_t>(((int64_t{1} << 32) + modulus - 1) / modulus);
  auto setup = [&](auto& args) { args.epilogue.thread = {{}, ModArguments{modulus, magic}}; };
  return run<ResidueOut>(A, B, D, M, N, K, L, lda, ldb, ldd, batch, setup, workspace, workspace_bytes, stream);
}
