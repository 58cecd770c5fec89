"""`torchrun --nproc-per-node 2` (gloo): ranks train disjoint trajectories and hold identical
policy and critic parameters after every iteration."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

from tests.helpers.stores import write_synthetic_store

RUNNER = Path(__file__).resolve().with_name("_dist_runner.py")


def _free_port() -> int:
    with socket.socket() as s:  # torchrun's --master-port 0 does not pick one for a static rendezvous
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_two_process_torchrun_keeps_parameters_identical(tmp_path: Path) -> None:
    store, out = tmp_path / "store", tmp_path / "out"
    out.mkdir()
    ids = write_synthetic_store(store, 13, per_shard=4)  # 3 iterations of 5, the last one short (3)
    p = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                        "--master-port", str(_free_port()), str(RUNNER), str(store), str(out)],
                       capture_output=True, text=True, timeout=900, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert p.returncode == 0, p.stderr[-3000:]
    r0, r1 = (json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1))
    assert r0["world"] == r1["world"] == 2
    assert len(r0["log"]) == len(r1["log"]) == 3
    for a, b in zip(r0["log"], r1["log"]):
        assert a["iteration"] == b["iteration"]
        assert not set(a["ids"]) & set(b["ids"])  # disjoint trajectories ...
        assert a["checksums"] == b["checksums"]  # ... and bit-identical parameters after the step
    trained = [i for entry in r0["log"] + r1["log"] for i in entry["ids"]]
    assert sorted(trained) == sorted(ids)
    # parameters moved at all (the checksums are not trivially equal constants)
    first, last = r0["log"][0]["checksums"], r0["log"][-1]["checksums"]
    assert any(first[k] != last[k] for k in first if k.startswith("policy."))


def test_traj_train_leaves_the_process_group_on_every_rank(tmp_path: Path) -> None:
    """`traj train` under torchrun (train() without a trainer) destroys the process group it
    joined before returning; a process that exits inside it can abort in gloo's teardown."""
    store, out = tmp_path / "store", tmp_path / "out"
    out.mkdir()
    write_synthetic_store(store, 10, per_shard=5)
    p = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                        "--master-port", str(_free_port()), str(RUNNER), str(store), str(out), "train"],
                       capture_output=True, text=True, timeout=900, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert p.returncode == 0, p.stderr[-3000:]
    ranks = [json.loads((out / f"train{r}.json").read_text()) for r in (0, 1)]
    assert [r["iterations"] for r in ranks] == [2, 2]
    assert [r["in_group_after"] for r in ranks] == [False, False]
    assert [r["is_main"] for r in ranks] == [True, False]  # only rank 0's summary is printed by traj train
