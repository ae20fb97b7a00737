"""Data engines: the embedded one (pyarrow + DuckDB) and Spark."""
