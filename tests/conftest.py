"""Test-wide hooks: the conformance tally printed at the end of every run."""


def pytest_terminal_summary(terminalreporter):
    try:
        from tests.conformance.test_onnx_backend import TALLY
    except ImportError:
        return
    if not TALLY:
        return
    terminalreporter.section("ONNX conformance")
    for (path, kind), (passed, total) in sorted(TALLY.items()):
        terminalreporter.write_line(f"{path:>8} {kind:>18}: {passed}/{total} cases pass")
