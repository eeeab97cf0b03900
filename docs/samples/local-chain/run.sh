# 1. A local chain: anvil, the test token, a buyer holding 100 USDC (it prints the keys)
python -m x402srv.devchain up --port 8545 > chain.log & CHAIN=$!
until grep -q "Running until Ctrl-C" chain.log 2> /dev/null; do sleep 0.2; done
cat chain.log
# 2. Fund another buyer with the test token (any address; anvil's dev #4 here)
python -m x402srv.devchain fund 0x15d34AAf54267DB7D7c367839AAf71A00a2C6A65 5.00 --rpc http://127.0.0.1:8545
# 3. Your seller (seller.toml above): the gas wallet is anvil's dev #1
export X402SRV_GAS_WALLET_KEY=0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d
export X402SRV_JWT_SECRET=a-development-secret-of-at-least-32-bytes
x402srv check --config seller.toml > /dev/null
x402srv --config seller.toml 2> seller.log & SELLER=$!
until curl -sf http://127.0.0.1:8402/healthz > /dev/null; do sleep 0.2; done
# 4. Buy "hourly" with the official x402 client, as anvil's dev #2
BUYER_KEY=0x5de4111afa1a4b94908f83103eb1f1706367c2e68ca870fc3fb9a804cdab365a python buyer.py
x402srv challenges list --config seller.toml
# 5. Stop both (Ctrl-C in their terminals does the same)
kill $SELLER $CHAIN
