"""A real headless Chromium for the console's tests, driven through playwright-core from npm.

``Browser`` starts ``node tests/support/browser.mjs`` (playwright-core, pointed at
Debian's ``/usr/bin/chromium``; ``./run test`` installs both) and sends it one
command at a time; a command that fails raises ``BrowserError`` with
Playwright's message (which names the selector and what it waited for).
Screenshots go under ``.artifacts/console/`` (gitignored), kept as test
artefacts.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from tests.support.paths import REPO

__all__ = ["ARTIFACTS", "CHROMIUM", "Browser", "BrowserError", "browser_missing"]

CHROMIUM = Path(os.environ.get("X402SRV_CHROMIUM", "/usr/bin/chromium"))
ARTIFACTS = REPO / ".artifacts" / "console"
DRIVER = REPO / "tests" / "support" / "browser.mjs"


def browser_missing() -> str | None:
    """Why the browser tests cannot run here (``./run test`` installs what they need)."""
    if not CHROMIUM.exists():
        return f"{CHROMIUM} is missing (./run test installs Debian's chromium)"
    if not (REPO / "node_modules" / "playwright-core").exists():
        return "node_modules/playwright-core is missing (./run test runs npm ci)"
    if shutil.which("node") is None:
        return "node is missing"
    return None


class BrowserError(AssertionError):
    """What Playwright said about a command that failed."""


class Browser:
    def __init__(self, log: Path) -> None:
        self.log = log
        self.process: subprocess.Popen[str] | None = None

    def __enter__(self) -> Self:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        self._stderr = self.log.open("w")
        self.process = subprocess.Popen(
            ["node", str(DRIVER)],
            cwd=REPO,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            env={**os.environ, "X402SRV_CHROMIUM": str(CHROMIUM)},
            start_new_session=True,
        )
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        process, self.process = self.process, None
        if process is not None:
            try:
                assert process.stdin is not None
                process.stdin.write(json.dumps({"op": "close"}) + "\n")
                # (and end of input: node keeps running while its stdin is open, so without
                # this every close waited out the 20 s below)
                process.stdin.close()
                process.wait(20)
            except (OSError, subprocess.TimeoutExpired):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)  # node and the Chromium it started
                process.wait(5)
            for pipe in (process.stdin, process.stdout):
                if pipe is not None:
                    pipe.close()
        self._stderr.close()

    def do(self, op: str, **args: Any) -> Any:
        process = self.process
        assert process is not None and process.stdin is not None and process.stdout is not None
        process.stdin.write(json.dumps({"op": op, **args}) + "\n")
        process.stdin.flush()
        line = process.stdout.readline()
        if not line:
            raise BrowserError(f"the browser driver exited: {self.log.read_text()[-2000:]}")
        answer = json.loads(line)
        if not answer["ok"]:
            raise BrowserError(f"{op} {args}: {answer['error']}")
        return answer["result"]

    def goto(self, url: str) -> dict[str, Any]:
        return dict(self.do("goto", url=url))

    def fill(self, selector: str, value: str) -> None:
        self.do("fill", selector=selector, value=value)

    def click(self, selector: str) -> None:
        self.do("click", selector=selector)

    def submit(self, selector: str) -> str:
        return str(self.do("submit", selector=selector)["url"])

    def wait_for(self, selector: str, text: str | None = None, state: str = "visible") -> None:
        self.do("waitFor", selector=selector, text=text, state=state)

    def wait_for_url(self, contains: str) -> str:
        return str(self.do("waitForUrl", contains=contains)["url"])

    def text(self, selector: str) -> str:
        return str(self.do("text", selector=selector))

    def count(self, selector: str) -> int:
        return int(self.do("count", selector=selector))

    def url(self) -> str:
        return str(self.do("url"))

    def viewport(self, width: int, height: int) -> None:
        self.do("viewport", width=width, height=height)

    def screenshot(self, name: str, *, full_page: bool = True) -> Path:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        path = ARTIFACTS / f"{name}.png"
        self.do("screenshot", path=str(path), fullPage=full_page)
        return path

    def scroll_width(self) -> int:
        return int(self.do("scrollWidth"))

    def problems(self) -> list[str]:
        return [str(p) for p in self.do("problems")]
