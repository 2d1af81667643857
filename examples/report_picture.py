"""Draws the bundled example's delegation picture for the README: docs/tiny_cnn_report.svg.

python examples/build_example.py && python examples/report_picture.py
"""

from __future__ import annotations

import os

import offload
from offload import report
from offload.partitioner import Partitioner

HERE = os.path.dirname(os.path.abspath(__file__))

if __name__ == "__main__":
    program = offload.load(os.path.join(HERE, "tiny_cnn.onnx"))
    # The Softmax denied to opencl shows a CPU op and the tensors crossing to it.
    partitioner = Partitioner("opencl", deny_ops=["Softmax"])
    path = os.path.join(HERE, "..", "docs", "tiny_cnn_report.svg")
    with open(path, "w") as f:
        f.write(report.render_svg(report.build(program, partitioner, measure=False)) + "\n")
    print(f"wrote {os.path.normpath(path)}")
