"""WarpSoftmax, a TF custom op with CPU and CUDA kernels (see README.md)."""
