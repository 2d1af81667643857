"""Passes that merge chains of the same op (reshapes, transposes, relus, paddings, casts)."""
