"""The seller's own API refuses revoked grants too: x402srv's published list, nothing secret."""

from x402srv import JWKSKeySource, RevocationList, TokenVerifier

verifier = TokenVerifier(
    JWKSKeySource("https://pay.example.com/.well-known/jwks.json"),
    issuer="https://pay.example.com",  # x402srv's seller.agent_url
    audience="https://pay.example.com",
    revocations=RevocationList(
        "https://pay.example.com/.well-known/x402srv-revocations.json",
        refresh_seconds=5,  # read again at most this often: the delay before a refusal
    ),
)
# With the seller's config (HS256):
#   TokenVerifier.from_config(config, revocations=RevocationList.for_config(config))
