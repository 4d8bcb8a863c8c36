// CUDA kernels of WarpSoftmax and WarpSoftmaxGrad.
//
// No TensorFlow header is included here: nvcc and TF's absl headers do not
// mix, and the kernels need nothing from TF. The OpKernel (the .cc) passes
// plain device pointers and the op's cudaStream_t to the Launch* functions
// at the bottom, which return the first CUDA error of the launch.
//
// Softmax is memory bound: the goal is one read of x from DRAM and one write
// of y. Which kernel runs depends on the row length (cols):
//   * cols <= 1024: one warp per row, the row held in registers (at most 32
//     floats per lane); max and sum are butterfly reductions over the warp
//     (__shfl_xor_sync), no shared memory and no __syncthreads.
//   * longer rows whose float32 copy fits in shared memory: one block per
//     row; each thread keeps its slice of the row in shared memory between
//     the max pass, the exp+sum pass and the scaling pass, so DRAM still sees
//     one read and one write.
//   * longer still: one block per row, one streaming pass keeps a running
//     (max, sum) per thread ("online softmax"), then a second read of x
//     writes exp(x - max) / sum.
// Loads and stores are 16 bytes wide (float4, or 8 halves) when both
// pointers are 16-byte aligned and cols is a multiple of the vector width,
// so a warp touches 512 contiguous bytes per access; otherwise the kernels
// fall back to scalar accesses with the same arithmetic.
// All arithmetic is float32; expf (not __expf) keeps the error within a few
// ULP for the large negative arguments that softmax produces.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>
#include <type_traits>

#include "warp_softmax.h"

namespace tflab {
namespace {

constexpr int kWarp = 32;
constexpr int kMaxWarpCols = 1024;
constexpr int kWarpRowsPerBlock = 4;  // 128-thread blocks for the warp kernels
constexpr unsigned kFull = 0xffffffffu;

template <WsDtype D> struct Elem;
template <> struct Elem<WsDtype::kFloat32> {
  using T = float;
  static __device__ __forceinline__ float Load(T v) { return v; }
  static __device__ __forceinline__ T Store(float v) { return v; }
};
template <> struct Elem<WsDtype::kFloat16> {
  using T = __half;
  static __device__ __forceinline__ float Load(T v) { return __half2float(v); }
  static __device__ __forceinline__ T Store(float v) { return __float2half_rn(v); }
};
template <> struct Elem<WsDtype::kBFloat16> {
  using T = __nv_bfloat16;
  static __device__ __forceinline__ float Load(T v) { return __bfloat162float(v); }
  static __device__ __forceinline__ T Store(float v) { return __float2bfloat16_rn(v); }
};

// VEC elements moved as one access: 16 bytes when VEC * sizeof(T) == 16.
template <typename T, int VEC>
struct alignas(sizeof(T) * VEC) Pack {
  T v[VEC];
};

template <WsDtype D, int VEC>
__device__ __forceinline__ void LoadPack(const typename Elem<D>::T* p, float* out) {
  const Pack<typename Elem<D>::T, VEC> pk =
      *reinterpret_cast<const Pack<typename Elem<D>::T, VEC>*>(p);
#pragma unroll
  for (int k = 0; k < VEC; ++k) out[k] = Elem<D>::Load(pk.v[k]);
}

template <WsDtype D, int VEC>
__device__ __forceinline__ void StorePack(typename Elem<D>::T* p, const float* in) {
  Pack<typename Elem<D>::T, VEC> pk;
#pragma unroll
  for (int k = 0; k < VEC; ++k) pk.v[k] = Elem<D>::Store(in[k]);
  *reinterpret_cast<Pack<typename Elem<D>::T, VEC>*>(p) = pk;
}

__device__ __forceinline__ float WarpMax(float v) {
#pragma unroll
  for (int o = kWarp / 2; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(kFull, v, o));
  return v;
}
__device__ __forceinline__ float WarpSum(float v) {
#pragma unroll
  for (int o = kWarp / 2; o > 0; o /= 2) v += __shfl_xor_sync(kFull, v, o);
  return v;
}

// Block-wide reductions; `scratch` holds one float per warp. Every thread
// gets the result.
__device__ __forceinline__ float BlockMax(float v, float* scratch) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int nwarps = (blockDim.x + kWarp - 1) / kWarp;
  v = WarpMax(v);
  __syncthreads();  // scratch may still be read by a previous reduction
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < nwarps ? scratch[lane] : -INFINITY;
  return WarpMax(v);
}
__device__ __forceinline__ float BlockSum(float v, float* scratch) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int nwarps = (blockDim.x + kWarp - 1) / kWarp;
  v = WarpSum(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < nwarps ? scratch[lane] : 0.0f;
  return WarpSum(v);
}

// Special rows follow the IEEE formula exp(x - max) / sum, as TF's Eigen and
// GPU kernels and XLA do (not TF's oneDNN CPU kernel, which gives
// [0, NaN, 0, 0] for [1, inf, 2, 0]; custom_ops/README.md, "Semantics"):
//   * NaN: fmaxf drops it from the max, but exp(NaN - m) makes the sum NaN,
//     so 1/sum and every output are NaN;
//   * +inf or all -inf: the max is +-inf (inf - inf, -inf - -inf), so 1/sum
//     is made NaN here (the online kernel would otherwise give a finite row).
__device__ __forceinline__ float InvSum(float m, float s) {
  return isinf(m) ? __int_as_float(0x7fffffff) : 1.0f / s;
}

// ------------------------------------------------- warp per row, forward ---
// Lane `lane` owns packs lane, lane + 32, ... of VEC consecutive elements.
template <WsDtype D, int VEC, int ITERS>
__global__ void __launch_bounds__(kWarp* kWarpRowsPerBlock)
    SoftmaxWarpKernel(const typename Elem<D>::T* __restrict__ x, typename Elem<D>::T* __restrict__ y,
                      int64_t rows, int cols) {
  const int lane = threadIdx.x;
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y; row < rows;
       row += static_cast<int64_t>(gridDim.x) * blockDim.y) {
    const typename Elem<D>::T* xr = x + row * cols;
    typename Elem<D>::T* yr = y + row * cols;
    float v[ITERS][VEC];
    float m = -INFINITY;
#pragma unroll
    for (int it = 0; it < ITERS; ++it) {
      const int c = (it * kWarp + lane) * VEC;
      if (VEC > 1) {
        // cols % VEC == 0 here, so a pack is entirely inside or outside.
        if (c < cols) {
          LoadPack<D, VEC>(xr + c, v[it]);
        } else {
#pragma unroll
          for (int k = 0; k < VEC; ++k) v[it][k] = -INFINITY;
        }
      } else {
        v[it][0] = c < cols ? Elem<D>::Load(xr[c]) : -INFINITY;
      }
#pragma unroll
      for (int k = 0; k < VEC; ++k) m = fmaxf(m, v[it][k]);
    }
    m = WarpMax(m);
    float s = 0.0f;
#pragma unroll
    for (int it = 0; it < ITERS; ++it) {
      const int c = (it * kWarp + lane) * VEC;
#pragma unroll
      for (int k = 0; k < VEC; ++k) {
        v[it][k] = c < cols ? expf(v[it][k] - m) : 0.0f;
        s += v[it][k];
      }
    }
    const float inv = InvSum(m, WarpSum(s));
#pragma unroll
    for (int it = 0; it < ITERS; ++it) {
      const int c = (it * kWarp + lane) * VEC;
      if (c >= cols) continue;
#pragma unroll
      for (int k = 0; k < VEC; ++k) v[it][k] *= inv;
      if (VEC > 1) {
        StorePack<D, VEC>(yr + c, v[it]);
      } else {
        yr[c] = Elem<D>::Store(v[it][0]);
      }
    }
  }
}

// ------------------------------------------- block per row, shared memory ---
// A thread's VEC floats go to shared memory as float4s when VEC is a multiple
// of 4: scalar stores with a stride of VEC floats between threads would hit
// the same bank several ways; 16-byte accesses by a warp are conflict-free.
template <int VEC>
__device__ __forceinline__ void SmemStore(float* buf, int p, const float* v) {
  if constexpr (VEC % 4 == 0) {
#pragma unroll
    for (int j = 0; j < VEC / 4; ++j) {
      reinterpret_cast<float4*>(buf + p * VEC)[j] = make_float4(v[4 * j], v[4 * j + 1], v[4 * j + 2],
                                                                v[4 * j + 3]);
    }
  } else {
#pragma unroll
    for (int k = 0; k < VEC; ++k) buf[p * VEC + k] = v[k];
  }
}

template <int VEC>
__device__ __forceinline__ void SmemLoad(const float* buf, int p, float* v) {
  if constexpr (VEC % 4 == 0) {
#pragma unroll
    for (int j = 0; j < VEC / 4; ++j) {
      const float4 q = reinterpret_cast<const float4*>(buf + p * VEC)[j];
      v[4 * j] = q.x;
      v[4 * j + 1] = q.y;
      v[4 * j + 2] = q.z;
      v[4 * j + 3] = q.w;
    }
  } else {
#pragma unroll
    for (int k = 0; k < VEC; ++k) v[k] = buf[p * VEC + k];
  }
}

template <WsDtype D, int VEC>
__global__ void SoftmaxSmemKernel(const typename Elem<D>::T* __restrict__ x,
                                  typename Elem<D>::T* __restrict__ y, int64_t rows, int cols) {
  extern __shared__ float4 row_buf4[];  // cols floats, 16-byte aligned
  float* row_buf = reinterpret_cast<float*>(row_buf4);
  __shared__ float scratch[kWarp];
  const int npacks = cols / VEC;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const typename Elem<D>::T* xr = x + row * cols;
    typename Elem<D>::T* yr = y + row * cols;
    float m = -INFINITY;
#pragma unroll 4
    for (int p = threadIdx.x; p < npacks; p += blockDim.x) {
      float v[VEC];
      LoadPack<D, VEC>(xr + p * VEC, v);
#pragma unroll
      for (int k = 0; k < VEC; ++k) m = fmaxf(m, v[k]);
      SmemStore<VEC>(row_buf, p, v);
    }
    m = BlockMax(m, scratch);
    // Each thread reads back only what it wrote: no barrier needed here.
    float s = 0.0f;
    for (int p = threadIdx.x; p < npacks; p += blockDim.x) {
      float v[VEC];
      SmemLoad<VEC>(row_buf, p, v);
#pragma unroll
      for (int k = 0; k < VEC; ++k) {
        v[k] = expf(v[k] - m);
        s += v[k];
      }
      SmemStore<VEC>(row_buf, p, v);
    }
    const float inv = InvSum(m, BlockSum(s, scratch));
    for (int p = threadIdx.x; p < npacks; p += blockDim.x) {
      float v[VEC];
      SmemLoad<VEC>(row_buf, p, v);
#pragma unroll
      for (int k = 0; k < VEC; ++k) v[k] *= inv;
      StorePack<D, VEC>(yr + p * VEC, v);
    }
    __syncthreads();  // row_buf is reused by the next row
  }
}

// ------------------------------------------ block per row, online (long) ---
__device__ __forceinline__ void OnlineAdd(float v, float& m, float& s) {
  if (v == -INFINITY) return;  // exp(-inf - m) = 0; avoids -inf - -inf
  if (v > m) {
    s = s * expf(m - v) + 1.0f;
    m = v;
  } else {
    s += expf(v - m);  // NaN v lands here and makes s NaN
  }
}

__device__ __forceinline__ void OnlineMerge(float m2, float s2, float& m, float& s) {
  const float mm = fmaxf(m, m2);
  const float a = s == 0.0f ? 0.0f : s * expf(m - mm);
  const float b = s2 == 0.0f ? 0.0f : s2 * expf(m2 - mm);
  m = mm;
  s = a + b;
}

template <WsDtype D, int VEC>
__global__ void SoftmaxOnlineKernel(const typename Elem<D>::T* __restrict__ x,
                                    typename Elem<D>::T* __restrict__ y, int64_t rows, int cols) {
  __shared__ float sm[kWarp], ss[kWarp];
  const int npacks = cols / VEC;
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int nwarps = (blockDim.x + kWarp - 1) / kWarp;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const typename Elem<D>::T* xr = x + row * cols;
    typename Elem<D>::T* yr = y + row * cols;
    float m = -INFINITY, s = 0.0f;
    for (int p = threadIdx.x; p < npacks; p += blockDim.x) {
      float v[VEC];
      LoadPack<D, VEC>(xr + p * VEC, v);
#pragma unroll
      for (int k = 0; k < VEC; ++k) OnlineAdd(v[k], m, s);
    }
#pragma unroll
    for (int o = kWarp / 2; o > 0; o /= 2) {
      OnlineMerge(__shfl_xor_sync(kFull, m, o), __shfl_xor_sync(kFull, s, o), m, s);
    }
    __syncthreads();
    if (lane == 0) {
      sm[warp] = m;
      ss[warp] = s;
    }
    __syncthreads();
    m = lane < nwarps ? sm[lane] : -INFINITY;
    s = lane < nwarps ? ss[lane] : 0.0f;
#pragma unroll
    for (int o = kWarp / 2; o > 0; o /= 2) {
      OnlineMerge(__shfl_xor_sync(kFull, m, o), __shfl_xor_sync(kFull, s, o), m, s);
    }
    const float inv = InvSum(m, s);
    for (int p = threadIdx.x; p < npacks; p += blockDim.x) {
      float v[VEC];
      LoadPack<D, VEC>(xr + p * VEC, v);
#pragma unroll
      for (int k = 0; k < VEC; ++k) v[k] = expf(v[k] - m) * inv;
      StorePack<D, VEC>(yr + p * VEC, v);
    }
  }
}

// ------------------------------------------------------------- backward ---
template <WsDtype D, int VEC, int ITERS>
__global__ void __launch_bounds__(kWarp* kWarpRowsPerBlock)
    GradWarpKernel(const typename Elem<D>::T* __restrict__ y, const typename Elem<D>::T* __restrict__ dy,
                   typename Elem<D>::T* __restrict__ dx, int64_t rows, int cols) {
  const int lane = threadIdx.x;
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y; row < rows;
       row += static_cast<int64_t>(gridDim.x) * blockDim.y) {
    const int64_t o = row * cols;
    float yv[ITERS][VEC], dv[ITERS][VEC];
    float dot = 0.0f;
#pragma unroll
    for (int it = 0; it < ITERS; ++it) {
      const int c = (it * kWarp + lane) * VEC;
      if (c < cols) {
        if (VEC > 1) {
          LoadPack<D, VEC>(y + o + c, yv[it]);
          LoadPack<D, VEC>(dy + o + c, dv[it]);
        } else {
          yv[it][0] = Elem<D>::Load(y[o + c]);
          dv[it][0] = Elem<D>::Load(dy[o + c]);
        }
#pragma unroll
        for (int k = 0; k < VEC; ++k) dot = fmaf(yv[it][k], dv[it][k], dot);
      }
    }
    dot = WarpSum(dot);
#pragma unroll
    for (int it = 0; it < ITERS; ++it) {
      const int c = (it * kWarp + lane) * VEC;
      if (c >= cols) continue;
#pragma unroll
      for (int k = 0; k < VEC; ++k) yv[it][k] *= dv[it][k] - dot;
      if (VEC > 1) {
        StorePack<D, VEC>(dx + o + c, yv[it]);
      } else {
        dx[o + c] = Elem<D>::Store(yv[it][0]);
      }
    }
  }
}

// Long rows: dot pass, then a second read of y and dy (mostly from L2).
template <WsDtype D, int VEC>
__global__ void GradBlockKernel(const typename Elem<D>::T* __restrict__ y,
                                const typename Elem<D>::T* __restrict__ dy,
                                typename Elem<D>::T* __restrict__ dx, int64_t rows, int cols) {
  __shared__ float scratch[kWarp];
  const int npacks = cols / VEC;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int64_t o = row * cols;
    float dot = 0.0f;
    for (int p = threadIdx.x; p < npacks; p += blockDim.x) {
      float a[VEC], b[VEC];
      LoadPack<D, VEC>(y + o + p * VEC, a);
      LoadPack<D, VEC>(dy + o + p * VEC, b);
#pragma unroll
      for (int k = 0; k < VEC; ++k) dot = fmaf(a[k], b[k], dot);
    }
    dot = BlockSum(dot, scratch);
    for (int p = threadIdx.x; p < npacks; p += blockDim.x) {
      float a[VEC], b[VEC];
      LoadPack<D, VEC>(y + o + p * VEC, a);
      LoadPack<D, VEC>(dy + o + p * VEC, b);
#pragma unroll
      for (int k = 0; k < VEC; ++k) a[k] *= b[k] - dot;
      StorePack<D, VEC>(dx + o + p * VEC, a);
    }
  }
}

// ---------------------------------------------------------------- launch ---

int BlockGrid(int64_t rows) { return static_cast<int>(rows < INT_MAX ? rows : INT_MAX); }

int WarpGrid(int64_t rows) {
  const int64_t blocks = (rows + kWarpRowsPerBlock - 1) / kWarpRowsPerBlock;
  return static_cast<int>(blocks < INT_MAX ? blocks : INT_MAX);
}

// Threads per block for the block-per-row kernels: about 4 packs per thread.
int BlockThreads(int npacks) {
  int t = 128;
  while (t < 1024 && t * 4 < npacks) t *= 2;
  return t;
}

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

int MaxSharedBytes() {
  int dev = 0, bytes = 48 * 1024;
  if (cudaGetDevice(&dev) == cudaSuccess) {
    cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
  }
  return bytes;
}

// The warp kernels keep ITERS packs per lane in registers, so ITERS is a
// template parameter: it is bucketed into powers of two from 1 up to
// kMaxWarpCols / (32 * VEC) (32 floats per lane at most). DispatchIters calls
// launch(std::integral_constant<int, N>{}) for the smallest bucket N >= iters,
// and returns cudaErrorInvalidValue when iters exceeds the largest bucket.
// One helper for the forward and the backward warp kernels.
template <int VEC, int N = 1, typename Launch>
cudaError_t DispatchIters(int iters, const Launch& launch) {
  constexpr int kMaxIters = kMaxWarpCols / (kWarp * VEC);
  static_assert(kMaxIters >= 1 && (kMaxIters & (kMaxIters - 1)) == 0, "power-of-two buckets");
  if (iters <= N) return launch(std::integral_constant<int, N>{});
  if constexpr (2 * N <= kMaxIters) {
    return DispatchIters<VEC, 2 * N>(iters, launch);
  } else {
    return cudaErrorInvalidValue;
  }
}

template <WsDtype D, int VEC>
cudaError_t ForwardWarp(const void* xv, void* yv, int64_t rows, int cols, cudaStream_t st) {
  using T = typename Elem<D>::T;
  const T* x = static_cast<const T*>(xv);
  T* y = static_cast<T*>(yv);
  const dim3 block(kWarp, kWarpRowsPerBlock);
  const int iters = (cols + kWarp * VEC - 1) / (kWarp * VEC);
  return DispatchIters<VEC>(iters, [&](auto bucket) {
    SoftmaxWarpKernel<D, VEC, decltype(bucket)::value>
        <<<WarpGrid(rows), block, 0, st>>>(x, y, rows, cols);
    return cudaGetLastError();
  });
}

template <WsDtype D, int VEC>
cudaError_t ForwardBlock(const void* xv, void* yv, int64_t rows, int cols, cudaStream_t st) {
  using T = typename Elem<D>::T;
  const T* x = static_cast<const T*>(xv);
  T* y = static_cast<T*>(yv);
  const int threads = BlockThreads(cols / VEC);
  const size_t smem = static_cast<size_t>(cols) * sizeof(float);
  if (smem <= static_cast<size_t>(MaxSharedBytes()) - kWarp * sizeof(float)) {
    if (smem > 48 * 1024) {
      const cudaError_t e = cudaFuncSetAttribute(
          SoftmaxSmemKernel<D, VEC>, cudaFuncAttributeMaxDynamicSharedMemorySize,
          static_cast<int>(smem));
      if (e != cudaSuccess) return e;
    }
    SoftmaxSmemKernel<D, VEC><<<BlockGrid(rows), threads, smem, st>>>(x, y, rows, cols);
    return cudaGetLastError();
  }
  SoftmaxOnlineKernel<D, VEC><<<BlockGrid(rows), threads, 0, st>>>(x, y, rows, cols);
  return cudaGetLastError();
}

template <WsDtype D>
cudaError_t Forward(const void* x, void* y, int64_t rows, int64_t cols64, cudaStream_t st) {
  if (cols64 > INT_MAX) return cudaErrorInvalidValue;
  const int cols = static_cast<int>(cols64);
  constexpr int kVec = 16 / sizeof(typename Elem<D>::T);
  const bool vec = Aligned16(x) && Aligned16(y) && cols % kVec == 0;
  if (cols <= kMaxWarpCols) {
    return vec ? ForwardWarp<D, kVec>(x, y, rows, cols, st) : ForwardWarp<D, 1>(x, y, rows, cols, st);
  }
  return vec ? ForwardBlock<D, kVec>(x, y, rows, cols, st) : ForwardBlock<D, 1>(x, y, rows, cols, st);
}

template <WsDtype D, int VEC>
cudaError_t BackwardImpl(const void* yv, const void* dyv, void* dxv, int64_t rows, int cols,
                         cudaStream_t st) {
  using T = typename Elem<D>::T;
  const T* y = static_cast<const T*>(yv);
  const T* dy = static_cast<const T*>(dyv);
  T* dx = static_cast<T*>(dxv);
  if (cols <= kMaxWarpCols) {
    const dim3 block(kWarp, kWarpRowsPerBlock);
    const int iters = (cols + kWarp * VEC - 1) / (kWarp * VEC);
    return DispatchIters<VEC>(iters, [&](auto bucket) {
      GradWarpKernel<D, VEC, decltype(bucket)::value>
          <<<WarpGrid(rows), block, 0, st>>>(y, dy, dx, rows, cols);
      return cudaGetLastError();
    });
  }
  GradBlockKernel<D, VEC><<<BlockGrid(rows), BlockThreads(cols / VEC), 0, st>>>(y, dy, dx, rows, cols);
  return cudaGetLastError();
}

template <WsDtype D>
cudaError_t Backward(const void* y, const void* dy, void* dx, int64_t rows, int64_t cols64,
                     cudaStream_t st) {
  if (cols64 > INT_MAX) return cudaErrorInvalidValue;
  const int cols = static_cast<int>(cols64);
  constexpr int kVec = 16 / sizeof(typename Elem<D>::T);
  const bool vec = Aligned16(y) && Aligned16(dy) && Aligned16(dx) && cols % kVec == 0;
  return vec ? BackwardImpl<D, kVec>(y, dy, dx, rows, cols, st)
             : BackwardImpl<D, 1>(y, dy, dx, rows, cols, st);
}

}  // namespace

cudaError_t LaunchWarpSoftmaxForward(WsDtype dtype, const void* x, void* y, int64_t rows,
                                     int64_t cols, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  switch (dtype) {
    case WsDtype::kFloat32: return Forward<WsDtype::kFloat32>(x, y, rows, cols, stream);
    case WsDtype::kFloat16: return Forward<WsDtype::kFloat16>(x, y, rows, cols, stream);
    case WsDtype::kBFloat16: return Forward<WsDtype::kBFloat16>(x, y, rows, cols, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t LaunchWarpSoftmaxBackward(WsDtype dtype, const void* y, const void* dy, void* dx,
                                      int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  switch (dtype) {
    case WsDtype::kFloat32: return Backward<WsDtype::kFloat32>(y, dy, dx, rows, cols, stream);
    case WsDtype::kFloat16: return Backward<WsDtype::kFloat16>(y, dy, dx, rows, cols, stream);
    case WsDtype::kBFloat16: return Backward<WsDtype::kBFloat16>(y, dy, dx, rows, cols, stream);
  }
  return cudaErrorInvalidValue;
}

const char* WarpSoftmaxCudaErrorString(cudaError_t err) { return cudaGetErrorString(err); }

}  // namespace tflab
