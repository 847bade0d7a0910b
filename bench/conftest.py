"""pytest-benchmark suite of the native core (`make bench`). Figures go to RESULTS.md."""
