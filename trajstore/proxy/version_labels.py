"""Which policy version produced which tokens of a recorded call, from the upstream's report or
the reload epochs the call's start and end saw (:func:`label_versions`)."""

from __future__ import annotations

from trajstore.proxy.recorder import VersionedSlice
from trajstore.proxy.sync import Ticket
from trajstore.proxy.upstream import CallResult, parse_version


def label_versions(call: CallResult, ticket: Ticket, end: Ticket, default: int) -> list[VersionedSlice]:
    """Which policy version produced which of a call's tokens.

    Per-token versions reported by the upstream (``weight_version_spans``) split the call;
    otherwise the upstream's single reported version, else the version the proxy loaded, is
    used, unless a reload happened while the call ran and the versions at its start and end
    differ: then the call is flagged with both (min, max): one action span with
    ``policy_version`` = min and ``policy_version_max`` = max, never one version alone.

    Args:
        ticket: the upstream's version and reload epoch when the call started.
        end: the same when its answer was complete.
    """
    n = len(call.action.token_ids)
    if call.version_spans:
        parsed = [(a, b, parse_version(v)) for a, b, v in call.version_spans]
        if all(v is not None for _, _, v in parsed) and parsed[0][0] == 0 and parsed[-1][1] == n:
            out: list[VersionedSlice] = []
            for a, b, v in parsed:
                assert v is not None
                if out and out[-1].version == v and out[-1].end == a:
                    out[-1].end = b
                else:
                    out.append(VersionedSlice(a, b, v))
            return out
    start = ticket.version
    crossed = end.epoch != ticket.epoch
    reported = parse_version(call.reported_version)
    last = reported if reported is not None else end.version
    if crossed and start is not None and last is not None and start != last:
        lo, hi = min(start, last), max(start, last)
        return [VersionedSlice(0, n, lo, (lo, hi))]
    v = reported if reported is not None else (start if start is not None else default)
    return [VersionedSlice(0, n, v)]
