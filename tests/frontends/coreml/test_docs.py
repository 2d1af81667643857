"""docs/coreml.md lists exactly the MIL ops offload translates."""

import re
from pathlib import Path

from offload.frontends import coreml  # noqa: F401  (registers the rules)
from offload.frontends.coreml_node import RULES

DOC = Path(__file__).resolve().parents[3] / "docs" / "coreml.md"
IMPORTER = {"const", "cond", "while_loop", "read_state", "write_state", "coreml_update_state"}


def test_the_table_lists_every_rule_and_nothing_else():
    table = DOC.read_text().split("## Supported ops", 1)[1]
    listed = set(re.findall(r"`([a-z0-9_]+)`", table)) - {"since"}
    assert listed == set(RULES) | IMPORTER
    assert f"{len(RULES)} MIL ops have a rule" in table
