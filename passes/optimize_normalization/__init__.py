"""Passes that fuse decomposed normalizations into LayerNormalization / InstanceNormalization."""
