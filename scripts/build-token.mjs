// Compiles our Solidity contracts with solc-js and writes the artifacts that
// x402srv.devchain deploys, so the demo and tests never need a Solidity compiler:
//
//   contracts/EIP3009Token.sol  -> x402srv/devchain/EIP3009Token.json  (the USDC look-alike)
//   contracts/BatchSettle.sol   -> x402srv/devchain/BatchSettle.json   (one tx, many authorizations)
//   contracts/SmartWallet.sol   -> x402srv/devchain/SmartWallet.json and SmartWalletFactory.json
//                                  (an ERC-1271 wallet and its CREATE2 factory, for the tests)
//   contracts/UniversalSigValidator.sol -> x402srv/settlement/UniversalSigValidator.json
//                                  (ERC-6492's deployless verifier: the server runs its bytecode)
//
// The settings below are part of each artifact's identity: a test recompiles the sources
// with this script and fails if a checked-in artifact differs.
//
// Usage: node scripts/build-token.mjs [--out-dir DIR]   (default: each artifact's place above)

import { createHash } from "node:crypto";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";

import solc from "solc";

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "..");
// [source file, contract, where the artifact lives in the package]
const CONTRACTS = [
  ["EIP3009Token", "EIP3009Token", "devchain"],
  ["BatchSettle", "BatchSettle", "devchain"],
  ["SmartWallet", "SmartWallet", "devchain"],
  ["SmartWallet", "SmartWalletFactory", "devchain"],
  ["UniversalSigValidator", "UniversalSigValidator", "settlement"],
];

// cancun: supported by anvil and by every chain x402 settles on; newer opcodes are not needed.
function settings(name) {
  return {
    optimizer: { enabled: true, runs: 200 },
    evmVersion: "cancun",
    outputSelection: { "*": { [name]: ["abi", "evm.bytecode.object"] } },
  };
}

function compile(name, sourceUnit, source) {
  // Each contract is compiled on its own: its source unit name is embedded in the
  // bytecode's metadata hash, so keep it independent of where the checkout lives.
  const input = {
    language: "Solidity",
    sources: { [sourceUnit]: { content: source } },
    settings: settings(name),
  };
  const output = JSON.parse(solc.compile(JSON.stringify(input)));
  const diagnostics = output.errors ?? [];
  for (const diagnostic of diagnostics) {
    process.stderr.write(diagnostic.formattedMessage ?? `${diagnostic.message}\n`);
  }
  if (diagnostics.some((d) => d.severity === "error")) {
    throw new Error(`${sourceUnit} failed to compile`);
  }
  return output.contracts[sourceUnit][name];
}

function build(file, name, outDir) {
  const sourceUnit = `contracts/${file}.sol`;
  const source = readFileSync(join(ROOT, sourceUnit), "utf8");
  const contract = compile(name, sourceUnit, source);
  const artifact = {
    contractName: name,
    abi: contract.abi,
    bytecode: `0x${contract.evm.bytecode.object}`,
    solcVersion: solc.version(),
    sourceSha256: createHash("sha256").update(source, "utf8").digest("hex"),
  };
  const out = join(outDir, `${name}.json`);
  writeFileSync(out, `${JSON.stringify(artifact, null, 2)}\n`);
  process.stdout.write(`wrote ${out}\n`);
}

function main() {
  const { values } = parseArgs({
    options: { "out-dir": { type: "string" } },
  });
  for (const [file, name, place] of CONTRACTS) {
    const outDir = values["out-dir"] ? resolve(values["out-dir"]) : join(ROOT, "x402srv", place);
    mkdirSync(outDir, { recursive: true });
    build(file, name, outDir);
  }
}

main();
