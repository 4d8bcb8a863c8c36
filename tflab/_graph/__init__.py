"""Helpers that read a traced graph and compare numbers: argument flattening and graph analysis, why a
traced mode failed where eager ran, ULP distance and bit comparison."""
