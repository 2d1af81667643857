"""Graph passes: cleanup, fusion and precision rewrites of an IR program (the Core ML MIL pass catalog).

A pass is a function over a ``Program`` that edits it in place and returns whether it changed
anything; it lives in ``passes/<group>/<name>.py`` and registers as ``group::name``
(see ``registry.py``). ``pipeline.py`` runs a list of them, to a fixed point where asked.
"""

from .pipeline import DEFAULT, PassRecord, run_passes
from .registry import PASSES, graph_pass, known_passes, resolve

__all__ = ["DEFAULT", "PASSES", "PassRecord", "graph_pass", "known_passes", "resolve", "run_passes"]
