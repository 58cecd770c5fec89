"""trajstore/errors.py: an OS error anywhere is one line naming the path."""

from __future__ import annotations


# new-user walkthrough: a finding (a slip in what a command prints)
def test_an_os_error_anywhere_is_one_line_naming_the_path() -> None:
    from trajstore.errors import os_error_line

    assert os_error_line(PermissionError(13, "Permission denied", "/x/y")) == "/x/y: Permission denied"
