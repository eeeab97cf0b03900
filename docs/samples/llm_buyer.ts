// Buy 1,000 completions for $1 with the official @x402/fetch client; top up when they run out.
import { wrapFetchWithPayment, x402Client } from "@x402/fetch";
import { ExactEvmScheme } from "@x402/evm/exact/client";
import { privateKeyToAccount } from "viem/accounts";

const ACCESS_URL = process.env.ACCESS_URL!; // https://pay.example.com/x402/access
const LLM_URL = process.env.LLM_URL!; // https://llm.example.com
const PAY_TO = process.env.PAY_TO!.toLowerCase(); // the seller's wallet, from a source you trust
const CALLS = Number(process.env.CALLS ?? "3");

const client = new x402Client()
  .register("eip155:*", new ExactEvmScheme(privateKeyToAccount(process.env.BUYER_KEY as `0x${string}`)))
  .registerPolicy((_version, offers) => offers.filter((o) => o.payTo.toLowerCase() === PAY_TO));
if (process.env.TOKEN_ADDRESS) {
  // a token other than USDC (the demo chain's): allow it, capped at 1.00
  client.setSpendControls({
    allowedAssets: [
      {
        network: process.env.NETWORK as `${string}:${string}`,
        asset: process.env.TOKEN_ADDRESS,
        maxAmountPerPayment: "1000000",
      },
    ],
  });
}
const fetchWithPayment = wrapFetchWithPayment(fetch, client);

// One paid request to x402srv: the 402, the payment, the answer (an AccessGrant, a TopUp).
async function pay(body: Record<string, string>): Promise<Record<string, string>> {
  const response = await fetchWithPayment(ACCESS_URL, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  if (!response.ok) throw new Error(`${response.status}: ${await response.text()}`);
  return (await response.json()) as Record<string, string>;
}

const grantRequest = crypto.randomUUID(); // persist it first: it fetches the grant and tops it up
const grant = await pay({ planId: "llm-1k", requestId: grantRequest });
console.log("bought:", grant.planId, "until", grant.expiresAt);
const auth = { Authorization: `Bearer ${grant.accessToken}`, "content-type": "application/json" };
let topUps = 0;
let answer: Response | undefined;
for (let n = 1; n <= CALLS; n++) {
  for (;;) {
    answer = await fetch(`${LLM_URL}/v1/completions`, {
      method: "POST",
      headers: auth,
      body: JSON.stringify({ prompt: `Question ${n}?` }),
    });
    if (answer.status === 429) {
      // this grant's rate limit: wait as told
      await new Promise((done) => setTimeout(done, Number(answer!.headers.get("Retry-After")) * 1000));
      continue;
    }
    if (answer.status === 402) {
      const problem = await answer.json();
      if (problem.code !== "CREDITS_EXHAUSTED") throw new Error(problem.detail);
      // The same grant gets another 1,000; the token stays the same.
      const receipt = await pay({ ...problem.topUp.body, requestId: crypto.randomUUID() });
      topUps += 1;
      console.log("topped up:", receipt.calls, "calls, tx", receipt.txHash);
      continue;
    }
    if (!answer.ok) throw new Error(`${answer.status}: ${await answer.text()}`);
    break;
  }
}
console.log("completions:", CALLS, "top-ups:", topUps);
console.log("last:", (await answer!.json()).completion);
console.log("RateLimit:", answer!.headers.get("RateLimit"));
