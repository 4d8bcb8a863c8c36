"""Python side of the custom ops (loader, wrappers, gradients)."""
