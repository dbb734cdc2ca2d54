"""Environment checks: one small module per check, run in the order of the registry below."""
