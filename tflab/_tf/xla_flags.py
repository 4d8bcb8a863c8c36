"""XLA's process-wide flag parser, reached through TF's shared library (no Python API in TF 2.21).

XLA parses ``XLA_FLAGS`` once per process into one ``DebugOptions``
(``xla/debug_options_flags.cc``: ``GetDebugOptionsFromFlags`` runs ``AllocateFlags``
once, and each compile copies the result into its module's config).
``xla/debug_options_flags.h`` declares ``void ParseDebugOptionFlagsFromEnv(bool
reset_envvar)``: it reads the variable again (``reset_envvar``: from the
environment, not the copy of the first parse) and sets the fields it names; the
others keep their values. TF 2.21 exports it from ``libtensorflow_framework.so.2``
(``nm -D``: ``T _ZN3xla28ParseDebugOptionFlagsFromEnvEb``), the library whose XLA
compiles ``experimental_get_compiler_ir``. An unknown flag in the variable ends the
process (``ParseFlagsFromEnvAndDieIfUnknown``): callers pass only flags XLA parsed before.
"""

from __future__ import annotations

import ctypes
import os

__all__ = ["SYMBOL", "debug_options_reader"]

#: ``xla::ParseDebugOptionFlagsFromEnv(bool)``, Itanium-mangled (TF's Linux and macOS builds).
SYMBOL = "_ZN3xla28ParseDebugOptionFlagsFromEnvEb"
_LIBRARIES = ("libtensorflow_framework.so.2", "libtensorflow_framework.2.dylib", "libtensorflow_framework.so")


def debug_options_reader():
    """``ParseDebugOptionFlagsFromEnv`` of the TF library this process loaded, as ``fn(reset_envvar)``; or None.

    Only the copy TF already loaded is opened (``RTLD_NOLOAD``): its XLA is the one that compiles.

    Returns:
        A ctypes function of one ``bool``, or None when no loaded TF library exports it.
    """
    import tensorflow as tf

    for name in _LIBRARIES:
        path = os.path.join(tf.sysconfig.get_lib(), name)
        if not os.path.exists(path):
            continue
        try:
            lib = ctypes.CDLL(path, mode=getattr(os, "RTLD_NOLOAD", 0) | ctypes.RTLD_LOCAL)
            fn = getattr(lib, SYMBOL)
        except (OSError, AttributeError):
            continue
        fn.argtypes, fn.restype = [ctypes.c_bool], None
        return fn
    return None
