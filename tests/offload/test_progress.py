"""Progress lines appear on a terminal and nowhere else."""

import io

from offload.progress import Progress


class _Tty(io.StringIO):
    def isatty(self):
        return True


def test_progress_is_silent_off_a_terminal():
    stream = io.StringIO()
    with Progress(stream).step("lowering"):
        pass
    assert stream.getvalue() == ""


def test_progress_shows_each_step_and_its_time_on_a_terminal():
    stream = _Tty()
    with Progress(stream).step("lowering"):
        assert stream.getvalue() == "lowering …"
    assert stream.getvalue().startswith("lowering …\rlowering: ")
    assert stream.getvalue().endswith(" s\n")


def test_items_show_a_bar_on_a_terminal_only():
    quiet = io.StringIO()
    assert list(Progress(quiet).items(range(3), "files")) == [0, 1, 2]
    assert quiet.getvalue() == ""
    stream = _Tty()
    assert list(Progress(stream).items(range(3), "files")) == [0, 1, 2]
    assert "files" in stream.getvalue() and "3/3" in stream.getvalue()
