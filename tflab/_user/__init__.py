"""The services between tflab and the user's code: calling it guarded, loading ``FILE.py:FUNC`` targets
and ``--arg`` values, rewriting one line of it, mapping traced ops back to its lines."""
