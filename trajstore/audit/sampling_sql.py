"""The reproducibility rule of stored log-probs (:mod:`trajstore.sampling`) as a SQL function of
every audit connection, so that ``traj stats`` and ``traj sql`` judge spans by the same rule as
``traj train``:

``logprob_refusal(logprob_mode, temperature, top_k, top_p, min_p, sampling_params)`` -> VARCHAR:
the reason (a key of :data:`trajstore.sampling.REFUSALS`) the trainer cannot reproduce the
distribution an action span's log-probs describe, NULL when it can. E.g.
``SELECT logprob_refusal(logprob_mode, temperature, top_k, top_p, min_p, sampling_params) AS why,
count(*) FROM spans WHERE kind = 'action' GROUP BY why``.
"""

from __future__ import annotations

import duckdb
import numpy as np
import pyarrow as pa

from trajstore.sampling import REFUSALS, span_sampling

FUNCTION = "logprob_refusal"
"""The SQL function's name."""

ARGUMENTS = ("logprob_mode", "temperature", "top_k", "top_p", "min_p", "sampling_params")
"""Its arguments, in order: the span fields of these names."""

_TYPES = (pa.string(), pa.float64(), pa.int64(), pa.float64(), pa.float64(), pa.string())


def _refusal(logprob_mode: pa.ChunkedArray, temperature: pa.ChunkedArray, top_k: pa.ChunkedArray,
             top_p: pa.ChunkedArray, min_p: pa.ChunkedArray, sampling_params: pa.ChunkedArray) -> pa.Array:
    """Arrow UDF: the reason of each span (NULL = reproducible), by the one rule."""
    columns = (logprob_mode, temperature, top_k, top_p, min_p, sampling_params)
    cols = [c.combine_chunks() if isinstance(c, pa.ChunkedArray) else c for c in columns]
    cols = [c.cast(t) for c, t in zip(cols, _TYPES)]
    n = len(cols[0])
    spans = pa.StructArray.from_arrays([pa.array(np.full(n, "action", dtype=object), pa.string()), *cols],
                                       names=["kind", *ARGUMENTS])
    codes, _ = span_sampling(spans)
    names = np.asarray(list(REFUSALS), dtype=object)
    return pa.array(np.where(codes >= 0, names[np.maximum(codes, 0)], None), pa.string())


def register_sampling_functions(conn: duckdb.DuckDBPyConnection) -> None:
    """Add :data:`FUNCTION` to `conn` (NULL arguments are passed in, as the rule reads nulls)."""
    conn.create_function(FUNCTION, _refusal, [duckdb.sqltypes.VARCHAR, duckdb.sqltypes.DOUBLE,
                                              duckdb.sqltypes.BIGINT, duckdb.sqltypes.DOUBLE,
                                              duckdb.sqltypes.DOUBLE, duckdb.sqltypes.VARCHAR],
                         duckdb.sqltypes.VARCHAR, type="arrow", null_handling="special", side_effects=False)
