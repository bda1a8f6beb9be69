"""Optimizers (being built)."""
