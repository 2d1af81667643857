"""Lowering an IR program to a .pte execution plan: values, instructions, memory plan (see docs/pte.md)."""
