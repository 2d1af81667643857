"""Preprocess passes: what a program's interface looks like to the outside (names)."""
