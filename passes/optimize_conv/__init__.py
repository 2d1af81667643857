"""Passes that fold following ops (bias, batch norm, scale, padding) into a convolution."""
