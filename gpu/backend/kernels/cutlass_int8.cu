// INT8 x INT8 -> INT32 GEMMs on CUTLASS 3's Hopper warp-specialized kernels (TMA loads, wgmma): gemmlab's
// cutlass_int8 route (gpu/backend/cutlass_int8.py), built by `gemmlab kernels --build`.
//
// D(M, N) = A(M, K) B(N, K)^T over k-contiguous INT8 rows (A's rows lda elements apart, B's ldb), D row-major with
// rows ldd apart, accumulated exactly in INT32: the bits of any exact INT8 GEMM. One kernel per compilation, named
// NAME and shaped by TILE_M/N/K, CLUSTER_M/N and PINGPONG (the choice is data: cutlass_int8.KERNELS).
// Returns 0 when issued on `stream`, 1 when CUTLASS cannot take the shape or alignment, 2 when the workspace is too
// small, 3 or 4 when initializing or launching fails; nothing is issued unless it returns 0.
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
using Fusion = cutlass::epilogue::fusion::Sm90EVT<
    cutlass::epilogue::fusion::Sm90Compute<cutlass::epilogue::thread::Identity, int32_t, int32_t,
                                           cutlass::FloatRoundStyle::round_to_nearest>,
    cutlass::epilogue::fusion::Sm90AccFetch>;

using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
    cutlass::epilogue::collective::EpilogueTileAuto, int32_t, int32_t,
    void, cutlass::layout::RowMajor, 4, int32_t, cutlass::layout::RowMajor, 4,
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
                    int64_t ldd, void* workspace, size_t workspace_bytes, cudaStream_t stream) {
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
      {{}, nullptr, sc, static_cast<int32_t*>(D), sd}};
  Gemm gemm;
  if (gemm.can_implement(args) != cutlass::Status::kSuccess) return 1;
  if (Gemm::get_workspace_size(args) > workspace_bytes) return 2;
  if (gemm.initialize(args, workspace, stream) != cutlass::Status::kSuccess) return 3;
  return gemm.run(stream) == cutlass::Status::kSuccess ? 0 : 4;
}
