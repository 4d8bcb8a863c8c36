// OpKernels of WarpSoftmax and WarpSoftmaxGrad, one per device.
//
// Both devices view the input as a row-major [rows, cols] matrix, cols being
// the last dimension (tf.nn.softmax's convention). The CPU kernels spread
// row blocks over TF's intra-op thread pool (ThreadPool::ParallelFor); the GPU
// kernels hand plain pointers and the op's CUDA stream to the launchers in
// warp_softmax_kernels.cu and turn a failed launch into errors::Internal.

#define EIGEN_USE_THREADS
#if GOOGLE_CUDA
#define EIGEN_USE_GPU
#endif

#include <algorithm>
#include <cstdint>
#include <functional>

#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_shape.h"
#include "tensorflow/core/platform/threadpool.h"
#include "warp_softmax.h"

namespace tflab {

using ::tensorflow::DEVICE_CPU;
using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
namespace errors = ::tensorflow::errors;

using CPUDevice = Eigen::ThreadPoolDevice;
#if GOOGLE_CUDA
using GPUDevice = Eigen::GpuDevice;
using ::tensorflow::DEVICE_GPU;
#endif

template <typename T> constexpr WsDtype DtypeOf();
template <> constexpr WsDtype DtypeOf<float>() { return WsDtype::kFloat32; }
template <> constexpr WsDtype DtypeOf<Eigen::half>() { return WsDtype::kFloat16; }
template <> constexpr WsDtype DtypeOf<Eigen::bfloat16>() { return WsDtype::kBFloat16; }

// [rows, cols] view of a rank >= 1 tensor; false (with an error set) otherwise.
inline bool RowsCols(OpKernelContext* ctx, const Tensor& t, const char* what, int64_t* rows,
                     int64_t* cols) {
  if (t.dims() < 1) {
    ctx->CtxFailure(errors::InvalidArgument(
        ctx->op_kernel().type_string(), ": ", what,
        " must have rank >= 1 (softmax runs over the last axis), got shape ",
        t.shape().DebugString()));
    return false;
  }
  *cols = t.dim_size(t.dims() - 1);
  *rows = *cols == 0 ? 0 : t.NumElements() / *cols;
  return true;
}

// Rows per task: about 128K elements (512 KiB of float32), and at least
// kMinTasks tasks. Several rows per task let the row kernel prefetch the next
// row while computing this one (it never prefetches past its task), e.g. 4 of
// the 32 rows of (32, 32000); many tasks, taken dynamically by the pool's
// threads, keep a thread that the OS preempts (2 cores shared with other
// work) from holding up the whole op, which one task per thread would.
constexpr int64_t kElementsPerTask = 131072;
constexpr int64_t kMinTasks = 8;

inline void ForRowBlocks(OpKernelContext* ctx, int64_t rows, int64_t cols,
                         const std::function<void(int64_t, int64_t)>& fn) {
  int64_t block = std::max<int64_t>(1, kElementsPerTask / std::max<int64_t>(cols, 1));
  block = std::max<int64_t>(1, std::min(block, (rows + kMinTasks - 1) / kMinTasks));
  if (rows <= block) {
    fn(0, rows);  // one task: no pool round trip
    return;
  }
  auto* workers = ctx->device()->tensorflow_cpu_worker_threads()->workers;
  workers->ParallelFor(rows, tsl::thread::ThreadPool::SchedulingParams::Fixed(block), fn);
}

// Outputs of at least this many bytes are written with non-temporal stores
// (measured on the 2-core machine: faster at 16 MiB and up, slower at 4 MiB,
// which stays in L3).
constexpr int64_t kStreamOutputBytes = int64_t{8} << 20;

// Per-device launch: the CPU and GPU specializations below.
template <typename Device, typename T>
struct WarpSoftmaxLaunch {
  static void Forward(OpKernelContext* ctx, const void* x, void* y, int64_t rows, int64_t cols);
  static void Backward(OpKernelContext* ctx, const void* y, const void* dy, void* dx,
                       int64_t rows, int64_t cols);
};

template <typename T>
struct WarpSoftmaxLaunch<CPUDevice, T> {
  static void Forward(OpKernelContext* ctx, const void* x, void* y, int64_t rows, int64_t cols) {
    // An output this large is not in cache when the next op reads it anyway,
    // so writing it around the caches costs nothing later and saves the
    // read-for-ownership now. Smaller outputs stay cached for the next op.
    const bool stream = rows * cols * static_cast<int64_t>(sizeof(T)) >= kStreamOutputBytes;
    ForRowBlocks(ctx, rows, cols, [&](int64_t r0, int64_t r1) {
      WarpSoftmaxRowsCpu(DtypeOf<T>(), x, y, r0, r1, cols, stream);
    });
  }
  static void Backward(OpKernelContext* ctx, const void* y, const void* dy, void* dx,
                       int64_t rows, int64_t cols) {
    ForRowBlocks(ctx, rows, cols, [&](int64_t r0, int64_t r1) {
      WarpSoftmaxGradRowsCpu(DtypeOf<T>(), y, dy, dx, r0, r1, cols);
    });
  }
};

#if GOOGLE_CUDA
template <typename T>
struct WarpSoftmaxLaunch<GPUDevice, T> {
  static void Forward(OpKernelContext* ctx, const void* x, void* y, int64_t rows, int64_t cols) {
    const cudaStream_t stream = ctx->eigen_device<GPUDevice>().stream();
    const cudaError_t err = LaunchWarpSoftmaxForward(DtypeOf<T>(), x, y, rows, cols, stream);
    OP_REQUIRES(ctx, err == cudaSuccess,
                errors::Internal("WarpSoftmax: CUDA kernel launch failed for [", rows, ", ",
                                 cols, "]: ", WarpSoftmaxCudaErrorString(err)));
  }
  static void Backward(OpKernelContext* ctx, const void* y, const void* dy, void* dx,
                       int64_t rows, int64_t cols) {
    const cudaStream_t stream = ctx->eigen_device<GPUDevice>().stream();
    const cudaError_t err =
        LaunchWarpSoftmaxBackward(DtypeOf<T>(), y, dy, dx, rows, cols, stream);
    OP_REQUIRES(ctx, err == cudaSuccess,
                errors::Internal("WarpSoftmaxGrad: CUDA kernel launch failed for [", rows, ", ",
                                 cols, "]: ", WarpSoftmaxCudaErrorString(err)));
  }
};
#endif  // GOOGLE_CUDA

template <typename Device, typename T>
class WarpSoftmaxOp : public OpKernel {
 public:
  explicit WarpSoftmaxOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    int64_t rows = 0, cols = 0;
    if (!RowsCols(ctx, x, "logits", &rows, &cols)) return;
    Tensor* y = nullptr;
    // Reuse the input buffer when no one else holds it (the kernels read a
    // row fully before writing it, so in-place is safe).
    OP_REQUIRES_OK(ctx, ctx->forward_input_or_allocate_output({0}, 0, x.shape(), &y));
    if (x.NumElements() == 0) return;
    WarpSoftmaxLaunch<Device, T>::Forward(ctx, x.tensor_data().data(),
                                          const_cast<char*>(y->tensor_data().data()), rows, cols);
  }
};

template <typename Device, typename T>
class WarpSoftmaxGradOp : public OpKernel {
 public:
  explicit WarpSoftmaxGradOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    const Tensor& y = ctx->input(0);
    const Tensor& dy = ctx->input(1);
    OP_REQUIRES(ctx, y.shape() == dy.shape(),
                errors::InvalidArgument("WarpSoftmaxGrad: softmax and grad_softmax must have "
                                        "the same shape, got ",
                                        y.shape().DebugString(), " and ",
                                        dy.shape().DebugString()));
    int64_t rows = 0, cols = 0;
    if (!RowsCols(ctx, y, "softmax", &rows, &cols)) return;
    Tensor* dx = nullptr;
    OP_REQUIRES_OK(ctx, ctx->forward_input_or_allocate_output({1}, 0, y.shape(), &dx));
    if (y.NumElements() == 0) return;
    WarpSoftmaxLaunch<Device, T>::Backward(ctx, y.tensor_data().data(), dy.tensor_data().data(),
                                           const_cast<char*>(dx->tensor_data().data()), rows,
                                           cols);
  }
};

#define TFLAB_REGISTER(DEV_NAME, DEV, T) \
  REGISTER_KERNEL_BUILDER( \
      Name("WarpSoftmax").Device(DEV_NAME).TypeConstraint<T>("T"), \
      WarpSoftmaxOp<DEV, T>); \
  REGISTER_KERNEL_BUILDER( \
      Name("WarpSoftmaxGrad").Device(DEV_NAME).TypeConstraint<T>("T"), \
      WarpSoftmaxGradOp<DEV, T>);

TFLAB_REGISTER(DEVICE_CPU, CPUDevice, float)
TFLAB_REGISTER(DEVICE_CPU, CPUDevice, Eigen::half)
TFLAB_REGISTER(DEVICE_CPU, CPUDevice, Eigen::bfloat16)
#if GOOGLE_CUDA
TFLAB_REGISTER(DEVICE_GPU, GPUDevice, float)
TFLAB_REGISTER(DEVICE_GPU, GPUDevice, Eigen::half)
TFLAB_REGISTER(DEVICE_GPU, GPUDevice, Eigen::bfloat16)
#endif
#undef TFLAB_REGISTER

}  // namespace tflab
