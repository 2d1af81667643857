"""Graph passes: cleanup, fusion and precision rewrites of an IR program (the Core ML MIL pass catalog)."""
