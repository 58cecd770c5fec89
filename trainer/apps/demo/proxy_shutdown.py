"""What ``traj proxy`` reported when the demo stopped it: its two shutdown lines parsed from its log
(:func:`parse_proxy_shutdown`) into a :class:`ProxyShutdown`, which the demo's summary states
instead of assuming that every open episode was stored."""

from __future__ import annotations

import re
from dataclasses import dataclass

from trajstore.wording import plural

FLUSH_LINE = re.compile(
    r"traj proxy: shutdown: flushed (?P<episodes>\d+) open episodes?(?:\(s\))? \((?P<calls>\d+) recorded "
    r"calls?(?:\(s\))?\) as aborted; waiting up to (?P<grace>\d+(?:\.\d+)?) ?s for (?P<in_flight>\d+) "
    r"calls?(?:\(s\))? in flight")
"""The line ``traj proxy`` prints on stderr as soon as SIGTERM has made it write its open episodes
as aborted (N episodes, M recorded calls; then it waits up to G s, its ``--shutdown-grace``, for
K calls in flight). "episode(s)" may be written as such or as the count's singular/plural."""

COMPLETE_LINE = re.compile(
    r"traj proxy: shutdown complete: (?P<stored>\d+) calls?(?:\(s\))? answered after the flush (?:were|was) "
    r"stored, (?P<cut>\d+) calls?(?:\(s\))? cut at the deadline")
"""The proxy's last line: A calls answered after the flush were stored, C were cut at its deadline."""


@dataclass(frozen=True)
class ProxyShutdown:
    """How ``traj proxy`` stopped, as its log and its exit tell it.

    Attributes:
        flushed_episodes: open episodes the proxy wrote as aborted at SIGTERM (None = it never
            printed its "shutdown: flushed" line).
        flushed_calls: model calls recorded in those episodes.
        grace_s: how long the proxy said it would wait for calls in flight (s).
        in_flight: calls in flight when it flushed.
        stored_after: calls answered after the flush and stored (None = no "shutdown complete" line).
        cut: calls still in flight at its deadline, not stored.
        exit_code: the process's exit code (negative = killed by that signal; None = unknown).
        killed: the demo had to SIGKILL it.
        stopped_by_demo: False when it had already exited before the demo stopped it.
        log: path of its log file.
    """

    flushed_episodes: int | None = None
    flushed_calls: int | None = None
    grace_s: float | None = None
    in_flight: int | None = None
    stored_after: int | None = None
    cut: int | None = None
    exit_code: int | None = None
    killed: bool = False
    stopped_by_demo: bool = True
    log: str = ""

    @property
    def flush_seen(self) -> bool:
        return self.flushed_episodes is not None

    @property
    def complete_seen(self) -> bool:
        return self.stored_after is not None

    def describe(self, *, episodes_cut: int) -> str:
        """One plain sentence for the demo's summary: what the proxy reported, and what may be
        lost when it reported less than a complete shutdown.

        Args:
            episodes_cut: the demo's episodes in flight when it stopped the proxy.
        """
        cut_note = f"the {plural(episodes_cut, 'episode')} in flight" if episodes_cut else "episodes open then"
        if not self.stopped_by_demo:
            return (f"traj proxy had exited with code {self.exit_code} before the demo stopped it (log: {self.log}): "
                    f"{cut_note} may be lost")
        if not self.flush_seen:
            how = "it was killed" if self.killed else f"it exited with code {self.exit_code}"
            return (f"traj proxy did not report flushing its open episodes (no 'shutdown: flushed' line in {self.log}; "
                    f"{how}): {cut_note} may be lost")
        flushed = (f"traj proxy, stopped: flushed {plural(self.flushed_episodes or 0, 'open episode')} "
                   f"({plural(self.flushed_calls or 0, 'recorded call')}) as aborted")
        if self.complete_seen:
            return (f"{flushed}; {plural(self.stored_after or 0, 'call')} answered after the flush stored, "
                    f"{plural(self.cut or 0, 'call')} cut at its {self.grace_s:g} s deadline"
                    + (" (then killed)" if self.killed else ""))
        how = "was killed" if self.killed else f"exited with code {self.exit_code}"
        return (f"{flushed}; then it {how} before reporting on the {plural(self.in_flight or 0, 'call')} in flight: "
                f"those may be lost (log: {self.log})")


def parse_proxy_shutdown(text: str) -> ProxyShutdown:
    """The numbers of the proxy's shutdown lines in `text` (its log after the SIGTERM); fields of
    a line that is not there stay None."""
    fields: dict[str, float | int] = {}
    flush = FLUSH_LINE.search(text)
    if flush is not None:
        fields.update(flushed_episodes=int(flush["episodes"]), flushed_calls=int(flush["calls"]),
                      grace_s=float(flush["grace"]), in_flight=int(flush["in_flight"]))
    done = COMPLETE_LINE.search(text)
    if done is not None:
        fields.update(stored_after=int(done["stored"]), cut=int(done["cut"]))
    return ProxyShutdown(**fields)  # type: ignore[arg-type]
