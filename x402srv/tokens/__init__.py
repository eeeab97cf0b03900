"""Access tokens: minting keys, verification, the verified-token cache, JWKS and revocation."""
