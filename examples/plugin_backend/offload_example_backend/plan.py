"""The plan format shared by both halves: a JSON list of ops over numbered values.

{"format": FORMAT,
 "inputs": [value id, ...],                 # the partition's non-constant inputs, in order
 "weights": {"value id": "tensor name"},    # constants, given by name to init
 "ops": [{"type", "name", "attributes", "inputs": [id | null], "outputs": [id | null]}],
 "outputs": [value id, ...]}
An output id is null for an unnamed output, which (as in offload.evaluate) nothing reads.
"""

FORMAT = "offload-example-plan/1"
