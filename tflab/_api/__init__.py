"""The public surface's machinery: package roots that load their names on first use, the one deprecation
table of renamed names, and the argument checks of the Python API and the CLI."""
