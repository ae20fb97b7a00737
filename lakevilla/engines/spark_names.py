"""The columns the Spark engine adds to frames of table rows: reserved names (``__lv``), which no
table or source may have. Apart from the types module so that the executors' tasks, which import
no pyspark, name them too."""

FILE_COL = "__lv_file"  # the row's file, as Spark names it (``input_file_name()``)
ROW_COL = "__lv_ri"  # the row's index in its file (``_metadata.row_index``, as DVs name rows)
CLAUSE_COL = "__lv_clause"  # the MERGE clause that made or changed the row (NULL: none)
# a row's id in a statement: its file's place in the statement's list of files, shifted, with its
# index in the file (``_metadata.row_index``) in the low bits. One long per row, where a file's
# name would be a hundred bytes in every shuffle.
RID_COL = "__lv_rid"
ROW_BITS = 40
ROW_MASK = (1 << ROW_BITS) - 1
