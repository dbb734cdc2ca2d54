"""Serving profiles: the TOML format, vLLM flags rendered from it, profiles written from evidence and
stale-stack checks."""
