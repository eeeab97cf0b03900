// Get back what a wallet bought, without paying again: sign-in-with-x (SIWX), @x402/fetch.
import { wrapFetchWithPayment, x402Client } from "@x402/fetch";
import { ExactEvmScheme } from "@x402/evm/exact/client";
import { createSIWxClientExtension } from "@x402/extensions/sign-in-with-x";
import { privateKeyToAccount } from "viem/accounts";

const ACCESS_URL = process.env.ACCESS_URL!; // https://pay.example.com/x402/access
const PAY_TO = process.env.PAY_TO!.toLowerCase(); // the seller's wallet, from a source you trust

const account = privateKeyToAccount(process.env.BUYER_KEY as `0x${string}`);
const client = new x402Client()
  .register("eip155:*", new ExactEvmScheme(account))
  .registerPolicy((_version, offers) => offers.filter((o) => o.payTo.toLowerCase() === PAY_TO));
// Before paying a 402 that declares sign-in-with-x, sign its message with the same wallet
// and send the request again: a wallet that holds a live grant gets it back.
client.registerExtension(createSIWxClientExtension({ signers: [account] }));

const fetchWithPayment = wrapFetchWithPayment(fetch, client);
const response = await fetchWithPayment(ACCESS_URL, {
  method: "POST",
  headers: { "content-type": "application/json" },
  body: JSON.stringify({ planId: "hourly" }),
});
const grant = await response.json();
console.log("/x402/access:", response.status, grant.planId, grant.accessToken);
