"""The docs hold no code that is not run: the rules of CONTRIBUTING.md, checked.

Every fenced block of a page is one of: an include of a file (``--8<--``, which
tests/docs/ runs or parses), a block cog generated from the code, an output
(``text``, ``json``), or a block marked on the line before it as run elsewhere
(``<!-- runs in: PATH ... -->``) or not run (``<!-- not run: why -->``). The
README cannot include files, so its code blocks must be the sample files, and
the links it holds must lead somewhere.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.paths import REPO

DOCS = REPO / "docs"
SITE_PAGES = sorted(p for p in DOCS.rglob("*.md") if "examples" not in p.relative_to(DOCS).parts)
PAGES = [
    *SITE_PAGES,
    REPO / "CONTRIBUTING.md",  # (in the site through an include)
    REPO / "CHANGELOG.md",
    DOCS / "examples" / "x402srv-example" / "README.md",
]
OUTPUTS = {"text", "json"}
FENCE = re.compile(r"^(?P<indent> *)(?P<fence>```+)(?P<lang>[\w-]*)\s*$")
INCLUDE = re.compile(r'^--8<-- "(?P<path>[^":]+)(?::[\w-]+)?"$')
MARK = re.compile(r"^<!-- (?P<kind>runs in|not run): (?P<why>\S.*) -->$")


@dataclass
class Block:
    page: Path
    line: int  # 1-based, the opening fence
    lang: str
    body: list[str]
    mark: re.Match[str] | None
    generated: bool

    def where(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}"


def blocks(page: Path) -> list[Block]:
    found: list[Block] = []
    lines = page.read_text().splitlines()
    in_cog, index = False, 0
    while index < len(lines):
        line = lines[index]
        if "[[[cog" in line:
            in_cog = True
        elif "[[[end]]]" in line:
            in_cog = False
        match = FENCE.match(line)
        if match is None:
            index += 1
            continue
        end = index + 1
        while lines[end].strip() != match["fence"]:
            end += 1
        before = next((lines[i].strip() for i in range(index - 1, -1, -1) if lines[i].strip()), "")
        body = [text.strip() for text in lines[index + 1 : end] if text.strip()]
        found.append(Block(page, index + 1, match["lang"], body, MARK.match(before), in_cog))
        index = end + 1
    return found


ALL_BLOCKS = [block for page in PAGES for block in blocks(page)]


@pytest.mark.parametrize("block", ALL_BLOCKS, ids=Block.where)
def test_every_code_block_is_run_generated_or_an_output(block: Block) -> None:
    if block.generated or block.lang in OUTPUTS:
        return
    if block.mark is not None:
        if block.mark["kind"] == "runs in":
            where = block.mark["why"].split()[0]
            assert (REPO / where.split("::")[0]).exists() or where.startswith("./run"), where
        assert len(block.body) <= 20, "a block that does not run must stay short"
        return
    assert block.body, "an empty block"
    for line in block.body:
        include = INCLUDE.match(line)
        assert include is not None, (
            f"{block.where()}: write code into a file a test runs and include it with --8<--, "
            "or mark the block (CONTRIBUTING.md, 'The docs')"
        )
        assert (REPO / include["path"]).is_file(), include["path"]


def test_every_sample_file_is_included_somewhere() -> None:
    """A sample no page shows is dead weight (and one the tests still run for nothing)."""
    included = {
        include["path"]
        for block in ALL_BLOCKS
        for line in block.body
        if (include := INCLUDE.match(line))
    }
    shown = {
        str(path.relative_to(REPO))
        for path in (DOCS / "samples").rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    }
    helpers = {"docs/samples/package.json", "docs/samples/tsconfig.json"}  # make buy.ts run
    assert shown - helpers <= included


# ------------------------------------------------------------------------ the README

README = REPO / "README.md"


def readme_blocks() -> list[tuple[str, str]]:
    return re.findall(r"^```(\w*)\n(.*?)^```$", README.read_text(), re.MULTILINE | re.DOTALL)


def test_the_readme_opens_with_the_two_commands() -> None:
    lang, body = readme_blocks()[0]
    commands = [line.split("#")[0].strip() for line in body.splitlines()]
    assert (lang, commands) == ("sh", ["./run serve", "./run test"])
    assert README.read_text().index("```sh") < 1000  # on the first screen, after the pitch
    assert body in (DOCS / "getting-started.md").read_text()  # the same two lines


def test_the_readme_quickstart_is_the_sample_files() -> None:
    code = [(lang, body) for lang, body in readme_blocks() if lang in ("toml", "python")]
    assert code == [
        ("toml", (DOCS / "samples" / "seller.toml").read_text()),
        ("python", (DOCS / "samples" / "weather_api.py").read_text()),
    ]


def test_the_readme_is_short_and_its_links_lead_somewhere() -> None:
    text = README.read_text()
    assert len(text.splitlines()) <= 150
    for target in re.findall(r"\]\((?!https?://)([^)#]+)(?:#[^)]*)?\)", text):
        assert (REPO / target).exists(), target
