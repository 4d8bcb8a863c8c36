#!/usr/bin/env bash
# WarpSoftmax on a GPU, in one go (for a session with an H200; no manual steps):
#   1. build the op with the CUDA kernels (sm_80, sm_90),
#   2. opcheck on the GPU (GPU vs CPU kernel, gradient, tf.function, SavedModel, XLA note),
#   3. the GPU-only tests (pytest -m gpu),
#   4. the GPU benchmark: 32768x1024 and 32768x4096 fp32 against device-to-device
#      copy bandwidth, tf.nn.softmax and jit_compile tf.nn.softmax, printing the ratios
#      (goals: >= 85% of copy bandwidth, >= 2x tf.nn.softmax, >= 1x XLA).
# A few minutes in all. Every step runs even when an earlier one fails, so one run prints
# everything; the exit status is the number of failed steps (0: all passed).
# Usage: benchmarks/gpu_check.sh   (PYTHON=... to pick the interpreter)
set -uo pipefail
failed=0
step() { echo "== $1"; shift; "$@" || { echo "!! step failed (exit $?)"; failed=$((failed + 1)); }; }
cd "$(dirname "$0")/.."
PY="${PYTHON:-}"
if [ -z "$PY" ]; then
  if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fi
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"

echo "== device"
# cudart is linked statically from the nvcc used to build: the driver must be at least
# as new as that CUDA release (CUDA 13 needs driver >= 580).
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || echo "nvidia-smi missing"
command -v nvcc >/dev/null && nvcc --version | grep release || echo "nvcc missing: the build will be CPU-only and step 4 will stop"
"$PY" -c "import tensorflow as tf; print('TF', tf.__version__, 'GPUs:', tf.config.list_physical_devices('GPU'))"

step "1. build" "$PY" -m custom_ops.build

echo "== 2. opcheck on GPU"
"$PY" - <<'PY' || { echo "!! step failed"; failed=$((failed + 1)); }
import tensorflow as tf
from custom_ops import opcheck, warp_softmax
assert tf.config.list_physical_devices("GPU"), "TensorFlow sees no GPU"
for shape, dtype in [((4, 37), tf.float32), ((64, 1000), tf.float32), ((8, 4096), tf.float32),
                     ((4, 50257), tf.float32), ((2, 70001), tf.float32),
                     ((16, 1024), tf.float16), ((16, 1024), tf.bfloat16)]:
    x = tf.cast(tf.random.stateless_normal(shape, seed=[0, shape[-1]]) * 4, dtype)
    r = opcheck(warp_softmax, x)
    g = r.check("gpu_vs_cpu")
    print(f"{dtype.name}{list(shape)}: {g.status}: {g.detail}")
    assert g.status == "pass", g
PY

step "3. GPU tests" "$PY" -m pytest -q -m gpu tests/test_09_custom_op_build.py

step "4. benchmark" "$PY" benchmarks/bench_softmax.py --device gpu
echo "== done: $failed step(s) failed"
exit "$failed"
