"""moto's S3 server with conditional writes decided atomically, as S3 decides them.

moto checks ``If-None-Match`` / ``If-Match`` and then stores the object, two steps with no
lock between them, so two conditional PUTs racing on one key can both succeed when its
threads interleave there (seen in CI on a loaded machine: 4 of 100 acknowledged LV[R]
commits overwritten by another client's put-if-absent of the same version). S3 decides
such a race for exactly one writer; every protocol in this project rests on that. This
module serialises moto's object PUT handler, which restores the promise at the price of
PUTs queuing inside the emulator; it also routes each request without rescanning moto's
services, and logs no line per request. The tests and benchmarks start moto only through here:

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


def route_without_rescanning() -> None:
    """Patch moto (in this process) so that finding a request's backend does not list moto's
    package folder and match every service's URL patterns again for each request: a quarter of
    the emulator's CPU per small request, which the S3 tests and benchmarks spend on two cores.
    The answer for a host never changes while the server runs. Idempotent."""
    from moto import backends
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication

    if getattr(backends.list_of_moto_modules, "lakevilla_cached", False):
        return
    modules = tuple(backends.list_of_moto_modules())

    def list_of_moto_modules() -> tuple[str, ...]:
        return modules

    list_of_moto_modules.lakevilla_cached = True  # type: ignore[attr-defined]
    backends.list_of_moto_modules = list_of_moto_modules  # type: ignore[assignment]
    find = DomainDispatcherApplication.get_backend_for_host
    found: dict[str | None, Any] = {}

    def get_backend_for_host(self: Any, host: str | None) -> Any:
        if host not in found:  # called under the dispatcher's lock
            found[host] = find(self, host)
        return found[host]

    DomainDispatcherApplication.get_backend_for_host = get_backend_for_host  # type: ignore[method-assign]


def main(argv: list[str] | None = None) -> None:
    import logging

    make_conditional_puts_atomic()
    route_without_rescanning()
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # no line per request: nobody reads it
    from moto.server import main as moto_main

    moto_main(argv if argv is not None else sys.argv[1:])


if __name__ == "__main__":
    main()
