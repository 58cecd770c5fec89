"""The stream's cursor: which rows of the store have been read. A checkpoint stores it (as
JSON) so that a resumed run neither repeats nor skips a trajectory."""

from __future__ import annotations

import json
from dataclasses import dataclass, field


@dataclass
class DataCursor:
    """How far the stream has read: shards finished, the shard in progress and its next row.

    Attributes:
        done_shards: names of shards whose every row was read (any order of arrival).
        shard: name of the shard being read, or None.
        next_row: index (0-based, within `shard`) of the first row not yet read.
    """

    done_shards: list[str] = field(default_factory=list)
    shard: str | None = None
    next_row: int = 0

    def to_json(self) -> str:
        return json.dumps({"done_shards": self.done_shards, "shard": self.shard, "next_row": self.next_row})

    @classmethod
    def from_json(cls, text: str) -> DataCursor:
        d = json.loads(text)
        return cls(list(d["done_shards"]), d["shard"], int(d["next_row"]))
