"""The ``--where`` filter: a DuckDB SQL predicate over a trajectory row's scalar columns, checked
once against the schema, then evaluated on in-memory Arrow tables only (no file or network access).

Example: ``"status = 'completed' AND num_actions >= 3"`` (columns:
:data:`trajstore.schema.SCALAR_COLUMNS`).
"""

from __future__ import annotations

import threading

import duckdb
import numpy as np
import pyarrow as pa

from trajstore.audit import is_plain_predicate, predicate_error
from trajstore.schema import SCALAR_COLUMNS, TRAJECTORY_SCHEMA
from trajstore.trainer.data.columns import with_missing_nullable_columns
from trajstore.trainer.data.errors import StreamClosed, TrainDataError


class WhereFilter:
    """A checked ``--where`` predicate with its own DuckDB connection.

    Args:
        where: the predicate (one boolean SQL expression over the scalar columns).

    Raises:
        TrainDataError: `where` is not one boolean expression, or DuckDB cannot evaluate it on the
            scalar columns (the message quotes DuckDB's reason for the user's own text).
    """

    def __init__(self, where: str):
        self.where = where
        self._lock = threading.Lock()  # a reader thread filters while the training thread may close
        self._duck: duckdb.DuckDBPyConnection | None = duckdb.connect()
        # The predicate only ever sees in-memory Arrow tables: no file or network access.
        self._duck.execute("SET enable_external_access = false")
        self._duck.execute("SET lock_configuration = true")
        empty = TRAJECTORY_SCHEMA.empty_table().select(list(SCALAR_COLUMNS))
        # The newline ends a trailing "--" comment that would swallow the closing parenthesis.
        probe = f"SELECT count(*) FROM trajectories WHERE ({where}\n)"
        try:
            if not is_plain_predicate(self._duck, where):
                raise TrainDataError(f"--where {where!r} is not a valid predicate over the scalar columns: "
                                     "must be one boolean expression")
            self._duck.register("trajectories", empty)
            self._duck.execute(probe).fetchall()
        except duckdb.Error as e:
            raise TrainDataError(f"--where {where!r} is not a valid predicate over the scalar columns: "
                                 f"{predicate_error(where, e)}") from e
        finally:
            self._duck.unregister("trajectories")

    def mask(self, table: pa.Table, *, shard: str) -> np.ndarray:
        """bool ``(table.num_rows,)``: True = the row passes the predicate.

        Raises:
            TrainDataError: the predicate fails on this data (e.g. a CAST of a value that is no
                integer), naming the shard.
            StreamClosed: :meth:`close` was called.
        """
        t = with_missing_nullable_columns(table.select([c for c in SCALAR_COLUMNS if c in table.column_names]),
                                          SCALAR_COLUMNS, shard=shard)
        t = t.append_column("__row", pa.array(np.arange(t.num_rows, dtype=np.int64)))
        with self._lock:
            if self._duck is None:
                raise StreamClosed("the training stream was closed")
            self._duck.register("trajectories", t)
            try:
                query = f"SELECT __row FROM trajectories WHERE ({self.where}\n)"
                rows = self._duck.execute(query).fetchnumpy()["__row"]
            except duckdb.Error as e:  # e.g. CAST(source AS INTEGER) on a value that is no integer
                raise TrainDataError(f"--where {self.where!r} fails on shard {shard}: "
                                     f"{str(e).splitlines()[0]}") from None
            finally:
                self._duck.unregister("trajectories")
        keep = np.zeros(t.num_rows, dtype=bool)
        keep[np.asarray(rows, dtype=np.int64)] = True
        return keep

    def close(self) -> None:
        """Release the connection. Safe while another thread is inside :meth:`mask`: it waits
        for that call (DuckDB refuses to close a busy connection); a later :meth:`mask` raises
        :class:`StreamClosed`. Idempotent."""
        with self._lock:
            if self._duck is not None:
                self._duck.close()
                self._duck = None
