"""README "Reading a store with other engines": each recipe, taken from the README's text and run
as written, reads a store of v1, v2, v3 and v4 shards with repeated ids as trajstore's reader does
(rows, rewards, tokens, action log-probs and their NaNs); after ``traj migrate`` and ``traj compact``
the plain reads do. Spark starts a JVM (about a minute on a loaded 2-core machine): slow step."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import trajstore as ts
from tests.helpers.mixed_versions import FIRST_COPY_VERSION, LATER_COPY_REWARD, write_mixed_version_store
from tests.helpers.paths import REPO_ROOT
from trajstore.maintenance.compact import compact_store
from trajstore.migrate import migrate_store
from trajstore.schema import SCHEMA_VERSION

README = (REPO_ROOT / "README.md").read_text()
MARK = "the store as trajstore reads it"


def recipe(first_line: str, store: Path) -> str:
    """The README code block whose first line starts with `first_line`, `STORE` replaced by `store`."""
    blocks = [b for b in re.findall(r"```(?:sql|python)\n(.*?)```", README, flags=re.S)
              if b.splitlines()[0].startswith(first_line)]
    assert len(blocks) == 1, f"README: {len(blocks)} code blocks start with {first_line!r}"
    return blocks[0].replace("STORE", str(store))


def plain_reads(store: Path) -> dict[str, str]:
    """The README's plain reads, one line each, by engine (the first name on the line)."""
    code = recipe("# plain reads", store)
    lines = [line for line in code.splitlines()[1:] if line.strip()]
    return {line.split(".")[0]: line for line in lines}


def run_python(code: str, **namespace: Any) -> dict[str, Any]:
    ns = dict(namespace)
    exec(compile(code, "README.md", "exec"), ns)  # noqa: S102 - the README's own recipe
    return ns


def rows_of(result: Any) -> list[dict]:
    """An engine's result as a list of row dicts: a DuckDB relation, a polars frame (lazy or
    not), a Spark DataFrame or a ``datasets.Dataset``."""
    import datasets
    import duckdb
    import polars as pl

    if isinstance(result, duckdb.DuckDBPyRelation):
        return [dict(zip(result.columns, r)) for r in result.fetchall()]
    if isinstance(result, pl.LazyFrame):
        result = result.collect()
    if isinstance(result, pl.DataFrame):
        return result.to_dicts()
    if isinstance(result, datasets.Dataset):
        return result.to_list()
    return [r.asDict(recursive=True) for r in result.collect()]  # Spark


def duckdb_rows(query: str) -> list[dict]:
    import duckdb

    return rows_of(duckdb.connect().sql(query))


def eval_plain(line: str, **engines: Any) -> list[dict]:
    """Rows of one of the README's plain-read lines, evaluated with `engines` as its names."""
    import datasets
    import duckdb
    import polars as pl

    names = {"duckdb": duckdb, "pl": pl, "datasets": datasets, **engines}
    return rows_of(eval(line, names))  # noqa: S307 - the README's own line


def assert_reads_as_trajstore(rows: list[dict], reference: pa.Table) -> None:
    """`rows` (an engine's output) hold exactly `reference`'s trajectories with the same reward,
    tokens and action log-probs (float32 values and NaN places equal), NaNs counting
    ``num_missing_logprobs``."""
    ref = {r["trajectory_id"]: r for r in reference.to_pylist()}
    ids = [r["trajectory_id"] for r in rows]
    assert sorted(ids) == sorted(reference.column("trajectory_id").to_pylist())
    for r in rows:
        want = ref[r["trajectory_id"]]
        where = f"trajectory {r['trajectory_id']}"
        assert r["reward"] == want["reward"], where
        assert (r["num_tokens"], list(r["tokens"])) == (want["num_tokens"], want["tokens"]), where
        got = np.asarray(r["action_logprobs"], dtype=np.float32)
        assert np.array_equal(got, np.asarray(want["action_logprobs"], np.float32), equal_nan=True), where
        assert len(got) == want["num_action_tokens"] and int(np.isnan(got).sum()) == want["num_missing_logprobs"], where


def assert_first_copies(rows: list[dict]) -> None:
    """Hand-known facts of the mixed store (tests/helpers/mixed_versions.py): 9 trajectories, no
    later copy (reward >= 100), ``schema_version`` 3 / 4 on rows read from v3 / v4 files, NULL on the others."""
    assert len(rows) == len(FIRST_COPY_VERSION) == 9
    assert all(r["reward"] < LATER_COPY_REWARD for r in rows)
    for r in rows:
        v = FIRST_COPY_VERSION[r["trajectory_id"]]
        assert r["schema_version"] == (v if v >= 3 else None), r["trajectory_id"]
    assert all("logprobs" not in r for r in rows)


@pytest.fixture
def mixed(tmp_path: Path) -> Path:
    root = tmp_path / "store"
    write_mixed_version_store(root)
    assert ts.read_trajectories(root, dedupe=False).num_rows == 15  # 6 later copies (the layout)
    return root


def test_duckdb_recipe_reads_a_mixed_store_as_trajstore(mixed: Path) -> None:
    # Before the recipe: DuckDB's plain read counted every copy and gave `logprobs` two lengths.
    rows = duckdb_rows(recipe(f"-- DuckDB (1.3 or newer): {MARK}", mixed))
    assert_first_copies(rows)
    assert_reads_as_trajstore(rows, ts.read_trajectories(mixed))


def test_polars_and_datasets_recipes_read_a_mixed_store_as_trajstore(mixed: Path) -> None:
    import datasets
    import polars as pl

    ns = run_python(recipe(f"# polars: {MARK}", mixed))
    assert isinstance(ns["trajectories"], pl.LazyFrame)
    rows = rows_of(ns["trajectories"])
    assert_first_copies(rows)
    reference = ts.read_trajectories(mixed)
    assert_reads_as_trajstore(rows, reference)

    ns = run_python(recipe(f"# Hugging Face datasets: {MARK}", mixed), trajectories=ns["trajectories"])
    assert isinstance(ns["ds"], datasets.Dataset)
    rows = ns["ds"].to_list()
    assert_first_copies(rows)
    assert_reads_as_trajstore(rows, reference)


def test_datasets_parquet_loader_refuses_a_mixed_store_which_is_why_the_recipe_goes_through_polars(
        mixed: Path, tmp_path: Path) -> None:
    import datasets

    with pytest.raises(Exception, match="(?i)generat|cast|schema|column"):
        datasets.load_dataset("parquet", data_files=str(mixed / "trajectories" / "*.parquet"), split="train",
                              cache_dir=str(tmp_path / "hf-cache"))


def test_after_migrate_every_row_is_current_the_short_recipe_and_plain_reads_agree(mixed: Path) -> None:
    migrate_store(mixed)
    assert {s.schema_version for s in ts.open_store(str(mixed)).list_shards(strict=True)} == {SCHEMA_VERSION}
    deduped = ts.read_trajectories(mixed)
    rows = duckdb_rows(recipe(f"-- DuckDB, every shard v{SCHEMA_VERSION} (after traj migrate): {MARK}", mixed))
    assert_reads_as_trajstore(rows, deduped)
    assert all(r["schema_version"] == SCHEMA_VERSION for r in rows) and len(rows) == 9
    # the mixed-store recipes still work on a store with no `logprobs` column left
    assert_reads_as_trajstore(duckdb_rows(recipe(f"-- DuckDB (1.3 or newer): {MARK}", mixed)), deduped)
    assert_reads_as_trajstore(rows_of(run_python(recipe(f"# polars: {MARK}", mixed))["trajectories"]), deduped)
    # a plain read is every stored row, copies included, one meaning per column
    as_stored = ts.read_trajectories(mixed, dedupe=False)
    reads = plain_reads(mixed)
    for engine in ("duckdb", "pl"):
        got = eval_plain(reads[engine])
        assert [r["trajectory_id"] for r in got] == as_stored.column("trajectory_id").to_pylist(), engine
        assert [r["reward"] for r in got] == as_stored.column("reward").to_pylist(), engine
        assert [len(r["action_logprobs"]) for r in got] == as_stored.column("num_action_tokens").to_pylist(), engine


def test_after_compact_the_plain_reads_give_trajstores_rows(mixed: Path, tmp_path: Path, monkeypatch) -> None:
    import datasets

    reference = ts.read_trajectories(mixed)
    res = compact_store(mixed, min_age_s=0, keep_replaced_s=0)
    assert len(res.groups) == 1 and res.groups[0]["dropped"] == 6
    assert len(list((mixed / "trajectories").glob("*.parquet"))) == 1
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "hf-cache"))
    reads = plain_reads(mixed)
    assert set(reads) == {"duckdb", "pl", "spark", "datasets"}
    for engine in ("duckdb", "pl", "datasets"):
        got = eval_plain(reads[engine])
        assert [r["trajectory_id"] for r in got] == reference.column("trajectory_id").to_pylist(), engine
        assert_reads_as_trajstore(got, reference)


def test_recipes_are_right_while_a_compactions_replaced_shards_are_still_there(mixed: Path) -> None:
    # Within --keep-replaced the glob sees the output and its sources; the output sorts first.
    reference = ts.read_trajectories(mixed)
    compact_store(mixed, min_age_s=0, keep_replaced_s=600)
    assert len(list((mixed / "trajectories").glob("*.parquet"))) == 6
    assert_reads_as_trajstore(duckdb_rows(recipe(f"-- DuckDB (1.3 or newer): {MARK}", mixed)), reference)
    assert_reads_as_trajstore(rows_of(run_python(recipe(f"# polars: {MARK}", mixed))["trajectories"]), reference)
    # ... while a plain read counts the replaced rows too (the README says so)
    assert len(duckdb_rows(f"SELECT trajectory_id FROM read_parquet('{mixed}/trajectories/*.parquet', "
                           "union_by_name = true)")) == 15 + 9


@pytest.fixture(scope="module")
def spark():
    pytest.importorskip("pyspark")
    if shutil.which("java") is None:
        pytest.skip("Spark needs Java (a JRE on PATH)")
    from pyspark.sql import SparkSession

    session = (SparkSession.builder.master("local[1]").appName("trajstore-recipes")
               .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "1")
               .config("spark.sql.session.timeZone", "UTC").getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.mark.slow
def test_spark_recipe_and_plain_read(spark, mixed: Path) -> None:
    reference = ts.read_trajectories(mixed)
    ns = run_python(recipe(f"# Spark (4 or newer; 3.5: see below): {MARK}", mixed), spark=spark)
    rows = rows_of(ns["trajectories"])
    assert_first_copies(rows)
    assert_reads_as_trajstore(rows, reference)
    compact_store(mixed, min_age_s=0, keep_replaced_s=0)
    got = eval_plain(plain_reads(mixed)["spark"], spark=spark)
    assert_reads_as_trajstore(got, reference)
