"""The seller's TOML: parsed, validated and resolved into typed models (docs/configuration.md)."""
