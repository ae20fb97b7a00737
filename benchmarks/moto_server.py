"""moto's S3 server with conditional writes decided atomically, as S3 decides them.

moto checks ``If-None-Match`` / ``If-Match`` and then stores the object, two steps with no
lock between them, so two conditional PUTs racing on one key can both succeed when its
threads interleave there (seen in CI on a loaded machine: 4 of 100 acknowledged LV[R]
commits overwritten by another client's put-if-absent of the same version). S3 decides
such a race for exactly one writer; every protocol in this project rests on that. This
module serialises moto's object PUT handler, which restores the promise at the price of
PUTs queuing inside the emulator. The tests and benchmarks start moto only through here:

    python -m benchmarks.moto_server -H 127.0.0.1 -p PORT   # moto.server's own options
"""

from __future__ import annotations

import sys
import threading
from typing import Any

_lock = threading.Lock()


def make_conditional_puts_atomic() -> None:
    """Patch moto (in this process) so that one object PUT runs at a time. Idempotent."""
    from moto.s3.responses import S3Response

    put = S3Response.put_object
    if getattr(put, "lakevilla_atomic", False):
        return

    def put_object(self: Any) -> Any:
        with _lock:  # the precondition check and the store happen together
            return put(self)

    put_object.lakevilla_atomic = True  # type: ignore[attr-defined]
    S3Response.put_object = put_object  # type: ignore[method-assign]


def main(argv: list[str] | None = None) -> None:
    make_conditional_puts_atomic()
    from moto.server import main as moto_main

    moto_main(argv if argv is not None else sys.argv[1:])


if __name__ == "__main__":
    main()
