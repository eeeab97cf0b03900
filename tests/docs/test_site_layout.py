"""The docs site shows what it includes whole (issue 30, item 4).

The configuration table wrapped key names mid-word ("seller.agent_ name") and the gateway
page cut its TOML comments off at the right edge. Key names in a table's first column do
not wrap (docs/stylesheets/extra.css, a rule mkdocs.yml loads), and the gateway sample's
lines fit the width a page shows without scrolling.
"""

from __future__ import annotations

import re

from tests.support.paths import REPO, SAMPLES

#: Characters of code a page shows without scrolling, at the site's width (76rem).
PAGE_COLUMNS = 72


def test_key_names_in_tables_never_break() -> None:
    config = (REPO / "mkdocs.yml").read_text()
    assert re.search(r"^extra_css:\n  - stylesheets/extra\.css", config, re.MULTILINE)
    css = (REPO / "docs" / "stylesheets" / "extra.css").read_text()
    rule = re.search(r"td:first-child code \{([^}]*)\}", css)
    assert rule is not None
    assert "white-space: nowrap" in rule.group(1)


def test_the_gateway_samples_lines_fit_the_page() -> None:
    text = (SAMPLES / "gateway.toml").read_text()
    shown = text.split("[start:routes]\n", 1)[1].split("# --8<-- [end:routes]", 1)[0]
    assert max(len(line) for line in shown.splitlines()) <= PAGE_COLUMNS
