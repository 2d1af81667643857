"""Op by op: each node of an ONNX model run alone from onnxruntime's own values of its inputs.

A model that re-quantizes its activations (QuantizeLinear, DynamicQuantizeLinear) is
discontinuous: a float result one rounding away from a step boundary becomes a whole quantization
step, and later layers amplify it, so two correct implementations whose float kernels sum in a
different order can end far apart. For such a model the end-to-end comparison cannot tell a wrong
kernel from a flipped rounding; this check can. onnxruntime runs the model as written
(``ORT_DISABLE_ALL``, every node's outputs exposed); then each top-level node becomes a one-node
model whose inputs are onnxruntime's values of the node's inputs, which offload imports, lowers
(``backend``) and runs, and its outputs are compared with onnxruntime's by the runner's rule
(``run.compare``). Nodes holding subgraphs are not checked alone (their bodies read outer values);
they are counted.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class OpwiseResult:
    checked: int = 0
    skipped: list = field(default_factory=list)  # op types of nodes with subgraphs
    differ: list = field(default_factory=list)  # "name (OpType): what differed"

    def text(self) -> str:
        if self.differ:
            return (
                f"{len(self.differ)} of {self.checked} ops differ from onnxruntime's inputs: {self.differ[0]}"
            )
        skipped = f", {len(self.skipped)} with subgraphs not checked alone" if self.skipped else ""
        return f"every op matches from onnxruntime's inputs ({self.checked} ops{skipped})"


def _intermediates(model, feeds: dict) -> dict:
    """onnxruntime's value of every top-level node output, the feeds and the initializers."""
    import onnx
    import onnxruntime as ort
    from onnx import numpy_helper

    exposed = onnx.ModelProto()
    exposed.CopyFrom(model)
    declared = {o.name for o in exposed.graph.output}
    for node in exposed.graph.node:
        for name in node.output:
            if name and name not in declared:
                exposed.graph.output.append(onnx.ValueInfoProto(name=name))
                declared.add(name)
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.intra_op_num_threads = 1
    opts.log_severity_level = 3
    session = ort.InferenceSession(exposed.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    values = dict(zip(names, session.run(None, feeds)))
    values.update(feeds)
    for init in model.graph.initializer:
        values[init.name] = numpy_helper.to_array(init)
    return values


def _alone(model, node, values: dict):
    """The node as a one-node model: its non-empty inputs are graph inputs or initializers."""
    import onnx
    from onnx import helper, numpy_helper

    initializers = {i.name for i in model.graph.initializer}
    graph = onnx.GraphProto(name=f"{node.op_type}_alone")
    graph.node.append(node)
    fed = {}
    for name in dict.fromkeys(i for i in node.input if i):
        value = np.asarray(values[name])
        if name in initializers:
            graph.initializer.append(numpy_helper.from_array(value, name))
            continue
        kind = helper.np_dtype_to_tensor_dtype(value.dtype)
        graph.input.append(helper.make_tensor_value_info(name, kind, value.shape))
        fed[name] = value
    for name in node.output:
        if name:
            graph.output.append(onnx.ValueInfoProto(name=name))
    alone = helper.make_model(graph, opset_imports=list(model.opset_import))
    alone.ir_version = model.ir_version
    return alone.SerializeToString(), fed


def check(path, feeds: dict, compare, backend: str | None = None) -> OpwiseResult:
    """Every top-level node of the ONNX model at ``path`` alone, on offload's CPU executor or on
    ``backend``, against onnxruntime's outputs from the same inputs; ``compare`` is the runner's
    rule (None when the outputs match, else what differed)."""
    import onnx

    import offload
    import offload.runtime

    model = onnx.load(str(path))
    values = _intermediates(model, feeds)
    result = OpwiseResult()
    for index, node in enumerate(model.graph.node):
        label = f"{node.name or index} ({node.op_type})"
        if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute):
            result.skipped.append(node.op_type)
            continue
        result.checked += 1
        data, fed = _alone(model, node, values)
        want = {name: values[name] for name in node.output if name}
        try:
            program = offload.load(data)
            if backend:
                program = offload.to_backend(program, backend)
            got = offload.runtime.load(offload.save(program)).run(fed)
            got = {name: got[name] for name in want}
        except Exception as err:  # a node offload cannot run alone is a difference too
            result.differ.append(f"{label}: {type(err).__name__}: {str(err).splitlines()[0][:120]}")
            continue
        diff = compare(got, want)
        if diff:
            result.differ.append(f"{label}: {diff}")
    return result
