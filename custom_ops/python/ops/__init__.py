"""One module per op: ``warp_softmax_ops``."""
