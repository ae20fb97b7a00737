"""Benchmarks reproducing the paper's section 6; see benchmarks/README.md."""
