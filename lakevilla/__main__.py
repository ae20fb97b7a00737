"""``python -m lakevilla``: the ``lakevilla`` command, for environments without its script."""

from .cli import main

raise SystemExit(main())
