X402SRV=${X402SRV:-http://127.0.0.1:8402}   # where x402srv listens (./run serve)

# 1. Discovery: every plan, as an x402 402 (header PAYMENT-REQUIRED = base64 of the same object)
curl -si -X POST "$X402SRV/x402/access" -H 'content-type: application/json' -d '{}'

# 2. Challenge: one plan; a PENDING challenge is stored and offered
curl -si -X POST "$X402SRV/x402/access" -H 'content-type: application/json' \
     -d '{"planId": "hourly", "requestId": "0b8f0c1e-1c57-4b5e-9a3a-7d1f1f3e2a10"}'
