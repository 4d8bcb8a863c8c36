// Declarations shared by the WarpSoftmax translation units.
//
// This header includes no TensorFlow header on purpose: it is read by
//   * warp_softmax_kernels.cc  (the OpKernels, compiled with TF's flags),
//   * warp_softmax_cpu.cc      (the vectorized row math, compiled without TF),
//   * warp_softmax_kernels.cu  (the CUDA kernels, compiled by nvcc; nvcc and
//     TF's absl headers do not mix, so the .cu sees only plain pointers).
// Tensors cross these boundaries as (const void*, dtype tag, rows, cols):
// Eigen::half / Eigen::bfloat16 and __half / __nv_bfloat16 share one bit
// layout (IEEE binary16 and the top half of a binary32), so no conversion is
// needed at the boundary.

#ifndef TFLAB_CUSTOM_OPS_CC_KERNELS_WARP_SOFTMAX_H_
#define TFLAB_CUSTOM_OPS_CC_KERNELS_WARP_SOFTMAX_H_

#include <cstdint>

#if GOOGLE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace tflab {

// Storage dtype of the tensors; the arithmetic is always float32.
enum class WsDtype : int { kFloat32 = 0, kFloat16 = 1, kBFloat16 = 2 };

// --- CPU (warp_softmax_cpu.cc) ------------------------------------------
// Each call handles rows [row_begin, row_end) of a row-major [rows, cols]
// tensor; the OpKernel spreads row ranges over TF's intra-op thread pool.

// y = softmax(x) over each row. stream_output: write float32 y with
// non-temporal stores (for outputs much larger than the caches, which the
// next op reads from DRAM anyway); results are identical either way.
void WarpSoftmaxRowsCpu(WsDtype dtype, const void* x, void* y,
                        int64_t row_begin, int64_t row_end, int64_t cols,
                        bool stream_output);

// dx = y * (dy - sum(dy * y)) over each row.
void WarpSoftmaxGradRowsCpu(WsDtype dtype, const void* y, const void* dy,
                            void* dx, int64_t row_begin, int64_t row_end,
                            int64_t cols);

// "avx512", "avx2+fma" or "scalar": which code path the CPU kernels picked at
// run time (decided once, from the CPU this process runs on, or forced by
// $TFLAB_WARP_SOFTMAX_ISA=scalar|avx2|avx512).
const char* WarpSoftmaxCpuIsa();

#if GOOGLE_CUDA
// --- CUDA (warp_softmax_kernels.cu) --------------------------------------
// Launch on `stream` (the op's stream, from TF's Eigen::GpuDevice). Return
// the first CUDA error of the launch sequence, cudaSuccess otherwise; the
// OpKernel turns a failure into errors::Internal.

cudaError_t LaunchWarpSoftmaxForward(WsDtype dtype, const void* x, void* y,
                                     int64_t rows, int64_t cols,
                                     cudaStream_t stream);

cudaError_t LaunchWarpSoftmaxBackward(WsDtype dtype, const void* y,
                                      const void* dy, void* dx, int64_t rows,
                                      int64_t cols, cudaStream_t stream);

// cudaGetErrorString from the CUDA runtime linked into this library (the
// OpKernel's translation unit does not link the runtime itself).
const char* WarpSoftmaxCudaErrorString(cudaError_t err);
#endif  // GOOGLE_CUDA

}  // namespace tflab

#endif  // TFLAB_CUSTOM_OPS_CC_KERNELS_WARP_SOFTMAX_H_
