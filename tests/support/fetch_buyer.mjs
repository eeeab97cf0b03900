// One purchase with the official @x402/fetch client, holding money on one network only.
// Env: ACCESS_URL, PLAN_ID, NETWORK (eip155:<id>), TOKEN_ADDRESS, MAX_AMOUNT, BUYER_KEY;
// optional METHOD (default POST) and BODY (default {"planId": PLAN_ID}; "" sends none).
// Prints {"status", "headers", "body", "paymentSignature"} as one JSON line: the last
// PAYMENT-SIGNATURE the client sent, so a test can repeat the buyer's own retry.
import { wrapFetchWithPayment, x402Client } from "@x402/fetch";
import { ExactEvmScheme } from "@x402/evm/exact/client";
import { privateKeyToAccount } from "viem/accounts";

const account = privateKeyToAccount(process.env.BUYER_KEY);
const client = new x402Client().register(process.env.NETWORK, new ExactEvmScheme(account));
// Our test token is on no allow-list: name it, with a cap in its atomic units.
client.setSpendControls({
  allowedAssets: [
    {
      network: process.env.NETWORK,
      asset: process.env.TOKEN_ADDRESS,
      maxAmountPerPayment: process.env.MAX_AMOUNT,
    },
  ],
});
let paymentSignature = null;
const recording = async (input, init) => {
  const request = new Request(input, init);
  paymentSignature = request.headers.get("payment-signature") ?? paymentSignature;
  return fetch(request);
};
const fetchWithPayment = wrapFetchWithPayment(recording, client);
const method = process.env.METHOD ?? "POST";
const body = process.env.BODY ?? JSON.stringify({ planId: process.env.PLAN_ID });
const response = await fetchWithPayment(process.env.ACCESS_URL, {
  method,
  headers: body ? { "content-type": "application/json" } : {},
  body: body || undefined,
});
console.log(
  JSON.stringify({
    status: response.status,
    headers: Object.fromEntries(response.headers),
    body: await response.json(),
    paymentSignature,
  }),
);
