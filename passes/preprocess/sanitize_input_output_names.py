"""preprocess::sanitize_input_output_names — the function's input and output names become identifiers.

Not in the default pipeline: it changes the names a caller feeds and reads. For consumers that
need identifiers (Core ML's MIL, generated code, some serving configs): every input and output
name of every function not of the form ``[A-Za-z_][A-Za-z0-9_]*`` has each other character
replaced by ``_`` and, when it starts with a digit (or is empty), ``_`` put in front; a name
another value of the program already has gets ``_1``, ``_2`` … A function's ``states`` follow
their inputs' new names.

Before::  block main(%input:0: (1,3)) { … } -> (%1output)
After::   block main(%input_0: (1,3)) { … } -> (%_1output)
"""

from __future__ import annotations

import re

from offload.ir import Program
from offload.ir.rewrite import all_names

from ..registry import graph_pass

IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def sanitized(name: str) -> str:
    out = re.sub(r"[^A-Za-z0-9_]", "_", name)
    return out if out and not out[0].isdigit() else "_" + out


@graph_pass("preprocess::sanitize_input_output_names")
def sanitize_input_output_names(program: Program) -> bool:
    taken = all_names(program)
    changed = False
    for fn in program.functions.values():
        renamed: dict[str, str] = {}
        for v in [*fn.inputs, *fn.outputs]:
            if IDENTIFIER.match(v.name):
                continue
            stem = candidate = sanitized(v.name)
            k = 0
            while candidate in taken:
                k += 1
                candidate = f"{stem}_{k}"
            taken.add(candidate)
            renamed[v.name] = candidate
            v.name = candidate
            changed = True
        fn.states = [renamed.get(s, s) for s in fn.states]
    return changed
