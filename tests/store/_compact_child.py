"""Child process for the SIGKILL test of ``traj compact``: compacts the store again and again
(small target: many outputs, each committed, then its sources deleted at once or left to a
later pass) until killed.

Usage: python _compact_child.py STORE_URI TARGET_MB KEEP_REPLACED_S [STORAGE_OPTIONS_JSON]

Prints ``ready`` (unbuffered) once imported, ``group <i>`` as each output is committed, and ``pass
<outputs>`` after each pass.
"""

from __future__ import annotations

import json
import sys

from trajstore.maintenance.compact import compact_store
from trajstore.store import open_store


def main() -> None:
    uri, target, keep = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
    opts = json.loads(sys.argv[4]) if len(sys.argv) > 4 else None
    store = open_store(uri, storage_options=opts)
    print("ready", flush=True)
    while True:
        r = compact_store(store, target_mb=target, min_age_s=0, keep_replaced_s=keep,
                          on_group=lambda info, i, n: print(f"group {i}", flush=True))
        print(f"pass {len(r.groups)}", flush=True)


if __name__ == "__main__":
    main()
