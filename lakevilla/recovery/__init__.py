"""LV[R]: sublogs (module #2) and recovery of stalled transactions."""
