"""Passes that fuse decomposed activations (GELU, leaky ReLU, PReLU, hard-swish) into one ONNX op."""
