"""The plan format shared by both halves of the `opencl` backend (JSON, no kernel sources).

{"format": FORMAT,
 "inputs": [value id, ...],                  # the partition's non-constant inputs, in order
 "weights": {"value id": "tensor name"},     # constants, given by name to init
 "shapes": {"value id": [dim, ...]},         # every value's static shape (float32)
 "ops": [{"type", "name", "attributes", "inputs": [id | null], "outputs": [id]}],
 "outputs": [value id, ...]}
"""

FORMAT = "offload-opencl-plan/1"
