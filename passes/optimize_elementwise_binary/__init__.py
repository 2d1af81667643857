"""Passes over elementwise binary ops."""
