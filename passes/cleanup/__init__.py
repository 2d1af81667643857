"""Cleanup passes: dead code, constant folding and deduplication, no-ops, redundant ops, order."""
