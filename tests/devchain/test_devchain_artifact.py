"""The checked-in contract artifacts must be what the build script makes from the sources."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import pytest

from tests.support.paths import REPO
from x402srv.devchain import BATCH_ARTIFACT_FILE, load_artifact

#: (contract name, artifact file): every contract scripts/build-token builds.
CONTRACTS = [("EIP3009Token", "EIP3009Token.json"), ("BatchSettle", BATCH_ARTIFACT_FILE)]


@pytest.mark.parametrize(("name", "artifact"), CONTRACTS)
def test_artifact_matches_source_hash(name: str, artifact: str) -> None:
    """Cheap staleness check that needs no compiler."""
    source = REPO / "contracts" / f"{name}.sol"
    loaded = load_artifact(artifact)
    assert loaded.contract_name == name
    assert loaded.source_sha256 == hashlib.sha256(source.read_bytes()).hexdigest()


def test_artifacts_equal_a_fresh_compile(tmp_path: Path) -> None:
    """One run of the build script rebuilds every artifact, byte for byte the committed ones."""
    subprocess.run(
        [str(REPO / "scripts" / "build-token"), "--out-dir", str(tmp_path)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    for _, artifact in CONTRACTS:
        fresh = json.loads((tmp_path / artifact).read_text())
        committed = json.loads((REPO / "x402srv" / "devchain" / artifact).read_text())
        assert fresh["abi"] == committed["abi"], "run scripts/build-token and commit the artifact"
        assert fresh["bytecode"] == committed["bytecode"], "run scripts/build-token"
        assert fresh == committed
