"""Passes that fuse decomposed activations (GELU, leaky ReLU, PReLU) into one ONNX op."""
