"""The checked-in token artifact must be what the build script makes from the source."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

from x402srv.devchain import load_artifact

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "contracts" / "EIP3009Token.sol"


def test_artifact_matches_source_hash() -> None:
    """Cheap staleness check that needs no compiler."""
    assert load_artifact().source_sha256 == hashlib.sha256(SOURCE.read_bytes()).hexdigest()


def test_artifact_equals_fresh_compile(tmp_path: Path) -> None:
    out = tmp_path / "EIP3009Token.json"
    subprocess.run(
        [str(ROOT / "scripts" / "build-token"), "--out", str(out)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    fresh = json.loads(out.read_text())
    committed = json.loads((ROOT / "x402srv" / "devchain" / "EIP3009Token.json").read_text())
    assert fresh["abi"] == committed["abi"], "run scripts/build-token and commit the artifact"
    assert fresh["bytecode"] == committed["bytecode"], "run scripts/build-token"
    assert fresh == committed
