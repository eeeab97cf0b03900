"""The checked-in contract artifacts must be what the build script makes from the sources."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import pytest

from tests.support.paths import REPO

SETTLEMENT = "x402srv/settlement"
#: (source file, contract name, artifact): every contract scripts/build-token builds.
CONTRACTS = [
    ("EIP3009Token", "EIP3009Token", "x402srv/devchain/EIP3009Token.json"),
    ("BatchSettle", "BatchSettle", "x402srv/devchain/BatchSettle.json"),
    ("SmartWallet", "SmartWallet", "x402srv/devchain/SmartWallet.json"),
    ("SmartWallet", "SmartWalletFactory", "x402srv/devchain/SmartWalletFactory.json"),
    ("UniversalSigValidator", "UniversalSigValidator", f"{SETTLEMENT}/UniversalSigValidator.json"),
]


@pytest.mark.parametrize(("file", "name", "artifact"), CONTRACTS)
def test_artifact_matches_source_hash(file: str, name: str, artifact: str) -> None:
    """Cheap staleness check that needs no compiler."""
    source = REPO / "contracts" / f"{file}.sol"
    loaded = json.loads((REPO / artifact).read_text())
    assert loaded["contractName"] == name
    assert loaded["sourceSha256"] == hashlib.sha256(source.read_bytes()).hexdigest()


def test_artifacts_equal_a_fresh_compile(tmp_path: Path) -> None:
    """One run of the build script rebuilds every artifact, byte for byte the committed ones."""
    subprocess.run(
        [str(REPO / "scripts" / "build-token"), "--out-dir", str(tmp_path)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    for _, _, artifact in CONTRACTS:
        fresh = json.loads((tmp_path / Path(artifact).name).read_text())
        committed = json.loads((REPO / artifact).read_text())
        assert fresh["abi"] == committed["abi"], "run scripts/build-token and commit the artifact"
        assert fresh["bytecode"] == committed["bytecode"], "run scripts/build-token"
        assert fresh == committed
