"""Neural-network layers (being built)."""
