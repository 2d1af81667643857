"""Partitioner: tags the ops each backend supports and groups them into convex partitions."""

from .partition import Partition, Partitioner, resolve_compiler
from .report import Placement, Reason, Report, format_report

__all__ = ["Partition", "Partitioner", "Placement", "Reason", "Report", "format_report", "resolve_compiler"]
