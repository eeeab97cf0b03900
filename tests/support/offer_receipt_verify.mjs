// @x402/extensions' own offer-receipt verifiers, run on what x402srv signed.
// stdin: {"items": [{"kind": "offer" | "receipt", "value": <signed object>}, ...]}.
// Prints one JSON line: per item {"ok": true, "signer"?, "payload"} or {"ok": false, "error"}.
// EIP-712 items are recovered (the signer is the address), JWS items verified with the key
// their kid names: did:web, which the verifier resolves by fetching the seller's did.json.
import {
  verifyOfferSignatureEIP712,
  verifyOfferSignatureJWS,
  verifyReceiptSignatureEIP712,
  verifyReceiptSignatureJWS,
} from "@x402/extensions/offer-receipt";

const chunks = [];
for await (const chunk of process.stdin) chunks.push(chunk);
const { items } = JSON.parse(Buffer.concat(chunks).toString("utf8"));

const verifiers = {
  offer: { eip712: verifyOfferSignatureEIP712, jws: verifyOfferSignatureJWS },
  receipt: { eip712: verifyReceiptSignatureEIP712, jws: verifyReceiptSignatureJWS },
};
const results = [];
for (const { kind, value } of items) {
  try {
    const verified = await verifiers[kind][value.format](value);
    results.push(
      value.format === "eip712"
        ? { ok: true, signer: verified.signer, payload: verified.payload }
        : { ok: true, payload: verified },
    );
  } catch (error) {
    results.push({ ok: false, error: String(error?.message ?? error) });
  }
}
console.log(JSON.stringify(results));
