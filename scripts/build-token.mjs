// Compiles contracts/EIP3009Token.sol with solc-js and writes the artifact that
// x402srv.devchain deploys, so the demo and tests never need a Solidity compiler.
//
// The settings below are part of the artifact's identity: a test recompiles the source
// with this script and fails if the checked-in artifact differs.
//
// Usage: node scripts/build-token.mjs [--out PATH]   (default: x402srv/devchain/EIP3009Token.json)

import { createHash } from "node:crypto";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";

import solc from "solc";

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const CONTRACT_NAME = "EIP3009Token";
// The source unit name is embedded in the bytecode's metadata hash; keep it independent
// of where the repository is checked out.
const SOURCE_UNIT = `contracts/${CONTRACT_NAME}.sol`;
const DEFAULT_OUT = join(ROOT, "x402srv", "devchain", `${CONTRACT_NAME}.json`);

// cancun: supported by anvil and by every chain x402 settles on; newer opcodes are not needed.
const SETTINGS = {
  optimizer: { enabled: true, runs: 200 },
  evmVersion: "cancun",
  outputSelection: { "*": { [CONTRACT_NAME]: ["abi", "evm.bytecode.object"] } },
};

function compile(source) {
  const input = {
    language: "Solidity",
    sources: { [SOURCE_UNIT]: { content: source } },
    settings: SETTINGS,
  };
  const output = JSON.parse(solc.compile(JSON.stringify(input)));
  const diagnostics = output.errors ?? [];
  for (const diagnostic of diagnostics) {
    process.stderr.write(diagnostic.formattedMessage ?? `${diagnostic.message}\n`);
  }
  if (diagnostics.some((d) => d.severity === "error")) {
    throw new Error(`${SOURCE_UNIT} failed to compile`);
  }
  return output.contracts[SOURCE_UNIT][CONTRACT_NAME];
}

function main() {
  const { values } = parseArgs({ options: { out: { type: "string", default: DEFAULT_OUT } } });
  const source = readFileSync(join(ROOT, SOURCE_UNIT), "utf8");
  const contract = compile(source);
  const artifact = {
    contractName: CONTRACT_NAME,
    abi: contract.abi,
    bytecode: `0x${contract.evm.bytecode.object}`,
    solcVersion: solc.version(),
    sourceSha256: createHash("sha256").update(source, "utf8").digest("hex"),
  };
  const out = resolve(values.out);
  mkdirSync(dirname(out), { recursive: true });
  writeFileSync(out, `${JSON.stringify(artifact, null, 2)}\n`);
  process.stdout.write(`wrote ${out}\n`);
}

main();
