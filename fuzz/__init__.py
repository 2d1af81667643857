"""Fuzzing harnesses for offload's loaders (atheris); ``python -m fuzz --help`` runs one (README.md)."""
