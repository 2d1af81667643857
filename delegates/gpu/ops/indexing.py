"""(filled in by the indexing family: see the package docstring for what a family module declares)."""

CAPS: dict = {}
CHECKS: dict = {}
LAUNCH: dict = {}
