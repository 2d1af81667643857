"""Lowering an IR program to a .pte execution plan: values, instructions, memory plan (see docs/pte.md)."""

from .lower import lower
from .memory_plan import MemoryPlan, PlanMemory, summarize

__all__ = ["MemoryPlan", "PlanMemory", "lower", "summarize"]
