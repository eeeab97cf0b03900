"""Local-chain tooling: anvil + a USDC-compatible EIP-3009 token, for tests, demo, benchmarks.

Typical use::

    with Devchain.start() as chain:
        buyer = chain.new_account()          # ETH for gas + 100 USDC (6 decimals)
        signature, authorization = sign_transfer_authorization(
            buyer, chain.token, to=seller, value=10_000, valid_after=0,
            valid_before=chain.block_timestamp() + 600,
        )

Only httpx, eth_account, eth_abi and eth_utils are used (no web3.py), so this ships in
the core package. anvil comes from `npm ci` (see package.json).
"""

from x402srv.devchain.anvil import (
    ANVIL_ENV_VAR,
    ANVIL_NPM_PACKAGE,
    ANVIL_VERSION,
    AnvilProcess,
    anvil_cache_dir,
    ensure_anvil,
    find_anvil,
)
from x402srv.devchain.authorization import (
    new_nonce,
    sign_cancel_authorization,
    sign_receive_authorization,
    sign_transfer_authorization,
)
from x402srv.devchain.chain import DEV_PRIVATE_KEY, Devchain
from x402srv.devchain.errors import (
    AnvilNotFoundError,
    AnvilStartError,
    DevchainError,
    RpcError,
    TransactionFailedError,
)
from x402srv.devchain.rpc import Receipt, RpcClient
from x402srv.devchain.settle import (
    BATCH_ARTIFACT_FILE,
    deploy_batch_settle,
    settle_batch,
    settle_on_chain,
)
from x402srv.devchain.token import (
    TokenArtifact,
    TokenInfo,
    TransferLog,
    authorization_state,
    balance_of,
    deploy_token,
    encode_call,
    load_artifact,
    mint,
    transfer_logs,
)

__all__ = [
    "ANVIL_ENV_VAR",
    "ANVIL_NPM_PACKAGE",
    "ANVIL_VERSION",
    "BATCH_ARTIFACT_FILE",
    "DEV_PRIVATE_KEY",
    "AnvilNotFoundError",
    "AnvilProcess",
    "AnvilStartError",
    "Devchain",
    "DevchainError",
    "Receipt",
    "RpcClient",
    "RpcError",
    "TokenArtifact",
    "TokenInfo",
    "TransactionFailedError",
    "TransferLog",
    "anvil_cache_dir",
    "authorization_state",
    "balance_of",
    "deploy_batch_settle",
    "deploy_token",
    "encode_call",
    "ensure_anvil",
    "find_anvil",
    "load_artifact",
    "mint",
    "new_nonce",
    "settle_batch",
    "settle_on_chain",
    "sign_cancel_authorization",
    "sign_receive_authorization",
    "sign_transfer_authorization",
    "transfer_logs",
]
