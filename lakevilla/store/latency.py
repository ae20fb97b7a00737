"""Simulated cloud latency: seconds per request kind, one profile per cloud.

``LatencyStore`` (lakevilla's requests) and the benchmarks' HTTP proxy (everyone's, delta-rs'
included) sleep by these profiles.
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass


@dataclass(frozen=True)
class LatencyProfile:
    """Seconds per request kind plus a transfer rate; jitter is a fraction of the base.
    ``conditional``: seconds of a conditional write (put-if-absent, put-if-match) where a cloud
    takes longer for them than for a plain PUT (None: a PUT's), ``conditional_jitter`` its
    spread."""

    get: float = 0.0
    head: float = 0.0
    put: float = 0.0
    list: float = 0.0
    delete: float = 0.0
    bytes_per_second: float = float("inf")
    jitter: float = 0.0
    conditional: float | None = None
    conditional_jitter: float = 0.0

    def delay(self, kind: str, nbytes: int = 0, rng: random.Random | None = None) -> float:
        if kind in ("put_if_absent", "put_if_match") and self.conditional is not None:
            base, jitter = self.conditional, self.conditional_jitter
        else:
            base, jitter = getattr(self, "put" if kind.startswith("put") else kind), self.jitter
        d = base + (nbytes / self.bytes_per_second if nbytes else 0.0)
        if jitter and rng is not None:
            d *= 1 + rng.uniform(-jitter, jitter)
        return max(d, 0.0)


# First-byte latencies close to S3 Standard seen from EC2 in the same region
# (small objects; LIST slower than GET; PUT slower than GET), ~100 MB/s per stream.
S3_SAME_REGION = LatencyProfile(get=0.015, head=0.012, put=0.025, list=0.030, delete=0.015,
                                bytes_per_second=100e6, jitter=0.2)

# One profile per cloud for side-by-side runs: the published latency of a conditional write on
# one key (S3 58-68 ms, Azure Premium 60-350 ms, Azure Standard 100-600 ms, GCS 500-700 ms: the
# middle of each range, its spread as jitter), every other request as S3_SAME_REGION's (no
# comparable published figures: the clouds differ here by their conditional writes alone).
# "azure" is Premium; "aws-s3" is S3_SAME_REGION with S3's published conditional writes.
CLOUD_PROFILES = {
    "aws-s3": dataclasses.replace(S3_SAME_REGION, conditional=0.063, conditional_jitter=0.08),
    "azure": dataclasses.replace(S3_SAME_REGION, conditional=0.205, conditional_jitter=0.7),
    "azure-standard": dataclasses.replace(S3_SAME_REGION, conditional=0.350,
                                          conditional_jitter=0.71),
    "gcs": dataclasses.replace(S3_SAME_REGION, conditional=0.600, conditional_jitter=0.17),
}


def uniform_latency(seconds: float) -> LatencyProfile:
    return LatencyProfile(get=seconds, head=seconds, put=seconds, list=seconds, delete=seconds)
