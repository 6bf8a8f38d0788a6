"""Weft's domain core. Nothing in this package imports ``azure.*``; adapters live in ``shared.adapters``."""
