// Pay x402srv with the official @x402/fetch client, then call the seller's API with the token.
import {
  decodePaymentResponseHeader,
  wrapFetchWithPayment,
  x402Client,
  x402HTTPClient,
} from "@x402/fetch";
import { ExactEvmScheme } from "@x402/evm/exact/client";
import { privateKeyToAccount } from "viem/accounts";

const ACCESS_URL = process.env.ACCESS_URL!; // https://pay.example.com/x402/access
const API_URL = process.env.API_URL!; // the seller's protected route
const PAY_TO = process.env.PAY_TO!.toLowerCase(); // the seller's wallet, from a source you trust
const RETRYABLE = new Set([409, 500, 502, 503]); // answered with Retry-After: ask again

const account = privateKeyToAccount(process.env.BUYER_KEY as `0x${string}`);
const client = new x402Client()
  .register("eip155:*", new ExactEvmScheme(account))
  // Never pay anyone but this seller, whatever a 402 says:
  .registerPolicy((_version, offers) => offers.filter((o) => o.payTo.toLowerCase() === PAY_TO));
// USDC on Base and Base Sepolia is allowed by default, at most $1 per payment. Any other
// token (like the demo chain's) must be listed, with a cap in atomic units:
if (process.env.TOKEN_ADDRESS) {
  client.setSpendControls({
    allowedAssets: [
      {
        network: process.env.NETWORK as `${string}:${string}`,
        asset: process.env.TOKEN_ADDRESS,
        maxAmountPerPayment: "2000000", // 2.00 USDC
      },
    ],
  });
}
const fetchWithPayment = wrapFetchWithPayment(fetch, client);

type AccessGrant = { planId: string; requestId: string; accessToken: string; txHash: string; expiresAt: string };

// POST the same request until it is no longer "come back later".
async function postUntilSettled(
  send: typeof fetch,
  body: object,
  headers: Record<string, string> = {},
): Promise<Response> {
  for (let attempt = 0; attempt < 30; attempt++) {
    const response = await send(ACCESS_URL, {
      method: "POST",
      headers: { "content-type": "application/json", ...headers },
      body: JSON.stringify(body),
    });
    const retryAfter = response.headers.get("Retry-After");
    if (!RETRYABLE.has(response.status) || retryAfter === null) return response;
    await new Promise((done) => setTimeout(done, Number(retryAfter) * 1000));
  }
  throw new Error("the settlement is still pending; retry later with the same requestId");
}

// Challenge-first. Store requestId BEFORE calling: it is how you get the grant back.
async function buy(planId: string, requestId: string): Promise<AccessGrant> {
  const response = await postUntilSettled(fetchWithPayment, { planId, requestId });
  if (!response.ok) {
    const problem = await response.json(); // application/problem+json
    throw new Error(`${problem.code}: ${problem.reason ?? problem.detail}`);
  }
  const settled = response.headers.get("PAYMENT-RESPONSE");
  if (settled) console.log("settled:", decodePaymentResponseHeader(settled).transaction);
  return (await response.json()) as AccessGrant;
}

const requestId = crypto.randomUUID(); // persist it with your agent's state first
const grant = await buy("hourly", requestId);
console.log("grant:", grant.planId, grant.txHash, "until", grant.expiresAt);
const again = await buy("hourly", requestId); // lost it? same requestId, no payment
console.log("same grant again:", again.txHash === grant.txHash);

// Discovery-first: POST {} offers every plan; the client pays the first one its policies
// accept. Keep the payment header: before the grant arrives it is the only handle on this
// purchase (a 409/502 is retried by re-sending it, without paying again).
const sent: Record<string, string>[] = [];
client.onAfterPaymentCreation(async (ctx) => {
  sent.push(new x402HTTPClient(client).encodePaymentSignatureHeader(ctx.paymentPayload));
});
let first = await fetchWithPayment(ACCESS_URL, {
  method: "POST",
  headers: { "content-type": "application/json" },
  body: "{}",
});
if (RETRYABLE.has(first.status)) first = await postUntilSettled(fetch, {}, sent.at(-1));
const offered = (await first.json()) as AccessGrant;
console.log("discovery-first:", first.status, offered.planId, offered.requestId);
const replay = (await (await postUntilSettled(fetch, {}, sent.at(-1))).json()) as AccessGrant;
console.log("the same header again, the same grant:", replay.txHash === offered.txHash);

const weather = await fetch(API_URL, { headers: { Authorization: `Bearer ${grant.accessToken}` } });
console.log("protected route:", weather.status, await weather.json());
