"""CLI verbs of ``tflab``: one module per verb (see `tflab.cli`)."""
