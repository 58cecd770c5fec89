"""``traj validate`` on an S3 store served by moto: the same problems, named by their s3:// file,
read through fsspec/s3fs one row group at a time (trajstore/validation/check.py)."""

from __future__ import annotations

import io

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.helpers.plain_shards import V2, row
from trajstore.validation import validate_files

pytestmark = pytest.mark.s3


def test_a_broken_row_in_an_s3_store_is_named_by_its_file_row_and_field(s3_store_uri) -> None:
    import s3fs

    uri, opts = s3_store_uri
    good, bad = row("a"), row("b")
    bad["num_action_tokens"] = 99  # a count that disagrees with the spans
    buf = io.BytesIO()
    pq.write_table(pa.Table.from_pylist([good, bad], schema=V2), buf, row_group_size=1)
    s3fs.S3FileSystem(**opts).pipe(f"{uri}/trajectories/x.parquet".removeprefix("s3://"), buf.getvalue())

    report = validate_files([uri], storage_options=opts)
    assert [(p.file.endswith("trajectories/x.parquet"), p.row_group, p.row, p.field) for p in report.problems] == [
        (True, 1, 1, "num_action_tokens")]  # row group 1, row 1 of the file (rows count from 0)
    assert report.problems[0].file.startswith("s3://")


def test_an_unreachable_endpoint_is_one_line_naming_the_path() -> None:
    # second walkthrough of `traj validate`: traj validate on an endpoint nobody answers printed a
    # botocore traceback (the listing's error was not caught); the other commands print one line
    from typer.testing import CliRunner

    from trajstore.cli.main import app

    opts = ["--storage-option", "endpoint_url=http://127.0.0.1:1", "--storage-option", "key=a",
            "--storage-option", "secret=b", "--storage-option", "config_kwargs={\"retries\": {\"max_attempts\": 1}}"]
    r = CliRunner().invoke(app, ["validate", "s3://nowhere-bucket/x", *opts])
    assert r.exit_code == 1, r.output
    assert "cannot list s3://nowhere-bucket/x" in r.output and "Traceback" not in r.output, r.output
