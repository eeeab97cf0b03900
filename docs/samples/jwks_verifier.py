"""Verify x402srv's EdDSA tokens with its published public keys: nothing secret here."""

from x402srv import JWKSKeySource, TokenVerifier

verifier = TokenVerifier(
    JWKSKeySource("https://pay.example.com/.well-known/jwks.json"),  # https (http: loopback only)
    issuer="https://pay.example.com",  # x402srv's seller.agent_url
    audience="https://pay.example.com",  # credentials.audience (default agent_url)
)
