// Where one thread's time goes in the WarpSoftmax CPU row kernel: each pass alone, in cache.
//
// Built and run by `benchmarks/bench_softmax.py --breakdown` (g++ -O2, like the library's CPU
// translation unit, which it includes, so it times the very functions the op runs):
//   warp_softmax_passes COLS ROWS REPS ISA
// prints one JSON line of nanoseconds per element, the best of REPS runs of each part over
// ROWS rows of COLS float32 (keep ROWS * COLS * 8 bytes inside L2, e.g. 16 x 4096):
//   max: pass 1 (read x, vector max, NaN check);
//   exp_store_sum: pass 2 (read x, exp(x - max), store e, blocked sum);
//   exp_sum: pass 2 without the store (what exp and the sum cost alone);
//   scale: pass 3 (read e, multiply by 1/sum, store y);
//   row / row_streamed: the whole kernel (ForwardRows) with cached / non-temporal stores.
// ISA: 1 = AVX2 (the functions below are the AVX2 ones; AVX-512 shares the algorithm).
#include "../kernels/warp_softmax_cpu.cc"

#include <chrono>
#include <cstdio>
#include <random>

namespace {

template <class F>
double Best(F f, int reps) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = s < best ? s : best;
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  using tflab::WsDtype;
  const int64_t cols = argc > 1 ? std::atoll(argv[1]) : 4096;
  const int64_t rows = argc > 2 ? std::atoll(argv[2]) : 16;
  const int reps = argc > 3 ? std::atoi(argv[3]) : 300;
  if (cols < 16 || rows < 1 || reps < 1 || cols > 65536) {
    std::fprintf(stderr, "usage: warp_softmax_passes COLS(16..65536) ROWS REPS\n");
    return 2;
  }
  if (!tflab::CpuHas(tflab::Isa::kAvx2)) {
    std::fprintf(stderr, "warp_softmax_passes: this CPU lacks AVX2+FMA\n");
    return 2;
  }
  std::vector<float> x(rows * cols), y(rows * cols), e(cols);
  std::mt19937 gen(0);
  std::normal_distribution<float> normal(0.f, 4.f);
  for (float& v : x) v = normal(gen);
  volatile float sink = 0;
  bool nan = false;
  const float* xp = x.data();
  const double t_max = Best([&] {
    for (int64_t r = 0; r < rows; ++r) sink = tflab::RowMax<WsDtype::kFloat32>(xp + r * cols, cols, &nan);
  }, reps);
  const double t_exp = Best([&] {
    for (int64_t r = 0; r < rows; ++r)
      sink = tflab::ExpStoreSum<WsDtype::kFloat32>(xp + r * cols, e.data(), cols, 12.f, nullptr, 0);
  }, reps);
  const double t_expsum = Best([&] {
    for (int64_t r = 0; r < rows; ++r) sink = tflab::ExpSum<WsDtype::kFloat32>(xp + r * cols, cols, 12.f);
  }, reps);
  const double t_scale = Best([&] {
    for (int64_t r = 0; r < rows; ++r) tflab::ScaleStore<WsDtype::kFloat32>(e.data(), y.data() + r * cols, cols, 0.5f);
  }, reps);
  const double t_row = Best([&] {
    tflab::ForwardRows<WsDtype::kFloat32>(tflab::Isa::kAvx2, xp, y.data(), 0, rows, cols, false);
  }, reps);
  const double t_stream = Best([&] {
    tflab::ForwardRows<WsDtype::kFloat32>(tflab::Isa::kAvx2, xp, y.data(), 0, rows, cols, true);
  }, reps);
  const double n = 1e-9 * static_cast<double>(rows * cols);
  std::printf("{\"cols\": %lld, \"rows\": %lld, \"reps\": %d, \"isa\": \"avx2\", \"ns_per_element\": "
              "{\"max\": %.4f, \"exp_store_sum\": %.4f, \"exp_sum\": %.4f, \"scale\": %.4f, "
              "\"row\": %.4f, \"row_streamed\": %.4f}}\n",
              static_cast<long long>(cols), static_cast<long long>(rows), reps, t_max / n, t_exp / n,
              t_expsum / n, t_scale / n, t_row / n, t_stream / n);
  return 0;
}
