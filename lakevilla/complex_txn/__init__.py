"""LV[CT]: cross-table dependency tracking (module #3) and the transaction record."""
