"""Autograd (being built): PyLayer, PyLayerContext, gradcheck."""
