"""(filled in by the reduce family: see the package docstring for what a family module declares)."""

CAPS: dict = {}
CHECKS: dict = {}
LAUNCH: dict = {}
