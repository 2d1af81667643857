"""The plan format shared by both halves of the `opencl` backend (JSON, no kernel sources).

{"format": FORMAT,
 "inputs": [value id, ...],                  # the partition's non-constant inputs, in order
 "weights": {"value id": "tensor name"},     # constants, given by name to init
 "shapes": {"value id": [dim, ...]},         # every value's static shape (float32)
 "ops": [{"type", "name", "attributes", "inputs": [id | null], "outputs": [id]}],
 "outputs": [value id, ...]}

Format 2 adds the step type "Fused": a tree of elementwise ops run as one generated kernel, its
intermediates never stored. Its "inputs" are the tree's leaf values (each broadcast to the output
shape through its own stride table), "outputs" the root's value, and
 "nodes": [{"type", "name", "attributes", "args": [["in", leaf index] | ["node", j] | null]}]
in evaluation order, the root last. The runtime generates the kernel source from the plan at init,
deterministically (the same plan gives the same source, so the build cache hits). Format 1 plans
(no "Fused" steps) still load.
"""

FORMAT = "offload-opencl-plan/2"
FORMATS = ("offload-opencl-plan/1", FORMAT)
