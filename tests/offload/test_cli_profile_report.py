"""`offload run --profile / --timeout` and `offload report` on the bundled example."""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET

import pytest

from offload.cli import main
from tests.delegates.opencl_support import needs_opencl


def test_run_profile_writes_a_chrome_trace_with_an_event_per_instruction(example_model, tmp_path, capsys):
    trace = tmp_path / "trace.json"
    assert main(["run", example_model, "--profile", str(trace)]) == 0
    printed = capsys.readouterr().out
    events = json.loads(trace.read_text())["traceEvents"]
    kernels = [e for e in events if e.get("cat") == "kernel"]
    assert kernels and all(e["ph"] == "X" and e["dur"] >= 0 for e in kernels)
    assert {e["args"]["op"] for e in kernels} >= {"onnx::Conv", "onnx::Softmax"}
    assert [e["name"] for e in events if e.get("cat") == "load"] == ["load"]  # the load is recorded too
    assert "total ms" in printed and f"wrote {trace}" in printed


def test_run_timeout_must_be_positive(example_model, capsys):
    assert main(["run", example_model, "--timeout", "-1"]) == 2
    assert "positive number of seconds" in capsys.readouterr().err


@needs_opencl
def test_report_writes_html_with_one_node_per_op(example_model, tmp_path, capsys):
    out = tmp_path / "report.html"
    assert main(["report", example_model, "--backend", "opencl", "-o", str(out)]) == 0
    page = out.read_text()
    svg = ET.fromstring(re.search(r"<svg .*?</svg>", page, re.S).group(0))
    ops = svg.findall(".//{http://www.w3.org/2000/svg}g[@class='op']")
    data = json.loads(re.search(r'id="report-data">(.*?)</script>', page, re.S).group(1))
    assert len(ops) == len(data["ops"]) == 10  # the tiny CNN as imported (no passes)
    assert data["measured"]["delegate_calls"] and "delegated 10/10 ops" in capsys.readouterr().out


def test_report_needs_a_backend(example_model, tmp_path, capsys):
    assert main(["report", example_model, "-o", str(tmp_path / "r.html")]) == 2
    assert "needs --backend" in capsys.readouterr().err


@pytest.mark.parametrize("flag", ["--json"])
def test_report_as_json(example_model, tmp_path, flag):
    out = tmp_path / "report.json"
    assert main(["report", example_model, "--backend", "example", "-o", str(out), flag, "--no-measure"]) == 0
    data = json.loads(out.read_text())
    assert data["summary"]["ops"] == len(data["ops"]) and data["backends"] == ["example"]


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


@pytest.mark.skipif(CHROMIUM is None, reason="no Chromium on this machine (Debian: apt-get install chromium)")
def test_report_renders_in_a_browser(example_model, tmp_path):
    """Chromium (headless) lays the page out: every op's box of the SVG has a size on screen and
    lies inside the drawing, and the page's JSON parses in the browser's own JSON."""
    out = tmp_path / "report.html"
    assert main(["report", example_model, "--backend", "opencl", "-o", str(out)]) == 0
    probe = """<script>
    const svg = document.querySelector('svg'), area = svg.getBoundingClientRect();
    const boxes = [...svg.querySelectorAll('g.op')].map(g => g.getBoundingClientRect());
    const inside = boxes.filter(b => b.width > 10 && b.height > 5 && b.left >= area.left - 1 &&
      b.right <= area.right + 1 && b.top >= area.top - 1 && b.bottom <= area.bottom + 1).length;
    const data = JSON.parse(document.getElementById('report-data').textContent);
    const p = document.createElement('pre'); p.id = 'probe';
    p.textContent = JSON.stringify({ops: boxes.length, inside: inside, json_ops: data.ops.length});
    document.body.appendChild(p);
    </script>"""
    page = tmp_path / "probe.html"
    page.write_text(out.read_text().replace("</body>", probe + "</body>"))
    dom = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", page.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout
    found = json.loads(html.unescape(re.search(r'<pre id="probe">(.*?)</pre>', dom, re.S).group(1)))
    assert found == {"ops": 10, "inside": 10, "json_ops": 10}
