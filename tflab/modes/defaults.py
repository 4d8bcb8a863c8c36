"""The modes `tflab.modes.compare_modes` runs and its default finding bounds, importable without numpy.

``tflab compare``'s ``add_arguments`` shows these defaults in ``--help``; the
parser is built before any verb runs (`tflab.cli.supervise`), so it must not
pull in numpy or TensorFlow through `tflab.modes`.
"""

MODES = ("eager", "graph", "xla")

# Default disagreement bound: an element is a finding when it is more than this
# many ULP *and* more than `atol` away from eager. ULP alone flags every result
# near zero (a 1e-9 difference around 1e-12 is millions of ULP), so both are used.
DEFAULT_ULP_BOUND = 1 << 12
DEFAULT_ATOL = 1e-5


#: the keys tf.config.optimizer.set_experimental_options reads (TF 2.21, eager/context.py's ``config``
#: property: each ``rewriter_toggle`` / ``rewriter_bool``, and ``min_graph_nodes``); any other is dropped.
GRAPPLER_OPTIONS = frozenset((
    "layout_optimizer constant_folding shape_optimization remapping arithmetic_optimization dependency_optimization "
    "loop_optimization function_optimization debug_stripper disable_model_pruning scoped_allocator_optimization "
    "pin_to_host_optimization implementation_selector auto_mixed_precision use_plugin_optimizers "
    "disable_meta_optimizer auto_mixed_precision_onednn_bfloat16 auto_mixed_precision_mkl min_graph_nodes").split())
