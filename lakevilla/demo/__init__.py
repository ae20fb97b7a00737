"""``make demo`` (``python -m lakevilla.demo``): a bank on a local Delta lake, told in acts
(``story.py``): concurrent transfers with and without features, auditors, a crash, and a
Spark pipeline (``spark.py``)."""
