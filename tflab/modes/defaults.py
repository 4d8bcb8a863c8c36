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
