"""Load generators and measurement for `broker perf` (produce, consume, e2e)."""
