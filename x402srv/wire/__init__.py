"""x402 v2 and A2A on the wire: codecs, offers, reasons, networks, EIP-712, the agent card."""
