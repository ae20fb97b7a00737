"""LV[I]: the global version log (module #4.1) and validation (module #4.2)."""
