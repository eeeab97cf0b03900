"""Run the ``x402srv ...`` lines of a docs shell sample in one process: ``python -m``.

    python -m tests.support.command_lines docs/samples/operator.sh

Each line goes through ``x402srv.cli.main.main``, the function the ``x402srv``
console script calls, with ``$VARS`` expanded and ``#`` comments dropped as the
shell would; the first failing line stops the run with its exit code, as
``bash -e`` would. One interpreter for every line: five ``x402srv`` processes
would each import web3 and the plugins again (about a second apiece).
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

from x402srv.cli.main import main


def run(script: Path) -> int:
    for line in script.read_text().splitlines():
        argv = shlex.split(os.path.expandvars(line), comments=True)
        if not argv:
            continue
        if argv[0] != "x402srv":
            raise SystemExit(f"not an x402srv command: {line}")
        print(f"$ {shlex.join(argv)}", flush=True)
        print(f"$ {shlex.join(argv)}", file=sys.stderr, flush=True)
        status = main(argv[1:])
        sys.stdout.flush()
        if status:
            return status
    return 0


if __name__ == "__main__":
    sys.exit(run(Path(sys.argv[1])))
