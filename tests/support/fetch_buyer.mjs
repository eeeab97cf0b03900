// One purchase with the official @x402/fetch client, holding money on one network only.
// Env: ACCESS_URL, PLAN_ID, NETWORK (eip155:<id>), TOKEN_ADDRESS, MAX_AMOUNT, BUYER_KEY.
// Prints {"status": ..., "body": ...} as one JSON line.
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
const fetchWithPayment = wrapFetchWithPayment(fetch, client);
const response = await fetchWithPayment(process.env.ACCESS_URL, {
  method: "POST",
  headers: { "content-type": "application/json" },
  body: JSON.stringify({ planId: process.env.PLAN_ID }),
});
console.log(JSON.stringify({ status: response.status, body: await response.json() }));
