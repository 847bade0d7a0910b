"""The `broker` command."""
