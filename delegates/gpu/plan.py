"""The plan format shared by the compile and runtime halves of the GPU backends (JSON, no kernel sources).

{"format": FORMAT,
 "inputs": [value id, ...],                  # the partition's non-constant inputs, in order
 "weights": {"value id": "tensor name"},     # constants, given by name to init
 "shapes": {"value id": [dim, ...]},         # every value's static shape
 "dtypes": {"value id": "float32" | ...},    # every value's numpy dtype name (format 3)
 "ops": [{"type", "name", "attributes", "inputs": [id | null], "outputs": [id | null]}],
 "outputs": [value id, ...]}

The step type "Fused" is a tree of elementwise ops run as one generated kernel, its
intermediates never stored. Its "inputs" are the tree's leaf values (each broadcast to the output
shape through its own stride table), "outputs" the root's value, and
 "nodes": [{"type", "name", "attributes", "args": [["in", leaf index] | ["node", j] | null]}]
in evaluation order, the root last. The runtime generates the kernel source from the plan at init,
deterministically (the same plan gives the same source, so the build cache hits).
Formats 1 and 2 (float32 only, no "dtypes") still load.
"""

FORMAT = "offload-gpu-plan/3"
FORMATS = ("offload-opencl-plan/1", "offload-opencl-plan/2", FORMAT)
