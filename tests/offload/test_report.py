"""The delegation report: every op drawn once, every CPU op listed with its reason, a profile."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET

from onnx import helper

import offload
from offload import report
from tests.delegates.opencl_support import model, needs_opencl

SVG = "{http://www.w3.org/2000/svg}"


def _partial():
    """Relu → NonZero (data-dependent: stays on the CPU) → Cast → ReduceSum → Mul(Relu, ·) → Exp."""
    nodes = [
        helper.make_node("Relu", ["x"], ["a"]),
        helper.make_node("NonZero", ["a"], ["nz"]),
        helper.make_node("Cast", ["nz"], ["nzf"], to=1),
        helper.make_node("ReduceSum", ["nzf"], ["s"], keepdims=1),
        helper.make_node("Mul", ["a", "s"], ["y"]),
        helper.make_node("Exp", ["y"], ["z"]),
    ]
    return model(nodes, [("x", [4, 8])], ["z"])


def _page(data):
    page = report.render_html(data)
    svg = ET.fromstring(re.search(r"<svg .*?</svg>", page, re.S).group(0))
    embedded = json.loads(re.search(r'id="report-data">(.*?)</script>', page, re.S).group(1))
    return page, svg, embedded


def test_the_report_draws_every_op_and_lists_each_cpu_op_with_its_reason():
    data = report.build(_partial(), "opencl", measure=False)
    page, svg, embedded = _page(data)
    ops = svg.findall(f".//{SVG}g[@class='op']")
    assert len(ops) == len(data["ops"]) == 6
    on_cpu = [op for op in data["ops"] if op["runs_on"] == "cpu"]
    assert [op["type"] for op in on_cpu] == ["NonZero"]
    assert [g.get("data-runs-on") for g in ops].count("cpu") == 1
    (reason,) = data["reasons"]
    assert reason["count"] == 1 and "NonZero" in reason["reason"] and reason["reason"] in page
    # Relu's output crosses to the CPU and back into Mul: both crossing edges carry 4x8 float32.
    crossing = [e for e in data["edges"] if e["crosses"]]
    assert {(data["ops"][e["source"]]["type"], data["ops"][e["target"]]["type"]) for e in crossing} >= {
        ("Relu", "NonZero"),
        ("Relu", "Mul"),
    }
    assert all(e["bytes"] == 128 for e in crossing if data["ops"][e["source"]]["type"] == "Relu")
    assert len(svg.findall(f".//{SVG}g[@class='partition']")) == data["summary"]["partitions"] == 2
    assert embedded["ops"] == json.loads(json.dumps(data["ops"]))


@needs_opencl
def test_the_report_measures_a_run_on_the_backend():
    data = report.build(_partial(), "opencl")
    measured = data["measured"]
    assert len(measured["delegate_calls"]) == 2 and all(
        d["runs_on"] == "backend" for d in measured["delegate_calls"]
    )
    assert measured["copies"]["copy to device"] > 0 and measured["total_ms"] > 0
    assert "One run:" in report.render_html(data)


@needs_opencl
def test_fp16_outputs_are_compared_with_fp32():
    program = model(
        [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Sigmoid", ["a"], ["z"])],
        [("x", [4, 8])],
        ["z"],
    )
    ranged = offload.calibrate(program, input_ranges={"x": (-4.0, 4.0)})
    data = report.build(ranged, "opencl", {"opencl": {"precision": "fp16"}})
    (error,) = data["measured"]["fp16_error"].values()
    assert 0 < error["max_rel"] < 1e-2  # half's rounding, not noise
    (said,) = data["measured"]["details"]
    assert "all 2 float32 values stored as half" in said, said
    # without a range for x, x and what it makes stay float32 (said, with why): no error
    data = report.build(program, "opencl", {"opencl": {"precision": "fp16"}})
    (error,) = data["measured"]["fp16_error"].values()
    (said,) = data["measured"]["details"]
    assert error["max_rel"] == 0 and "precision fp16 (mixed)" in said and "range unknown" in said, said
    assert "What each delegate says" in report.render_html(data)
