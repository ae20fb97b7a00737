"""The lake's past across tables: one consistent cut as of a moment (``lake.at``) and the
change rows between two such cuts (``lake.changes``). Read only: nothing here writes, except
that a global-log position whose decided writes were never published has them written from
the log, as every isolated reader does."""
