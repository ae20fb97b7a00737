"""``python -m benchmarks.ycsb``."""

from . import main

main()
