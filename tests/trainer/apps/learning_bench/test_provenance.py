"""trainer/apps/learning_bench/provenance.py: machine.json says which machine, software and
commit made a run, and whether the machine was loaded."""

from __future__ import annotations


def test_machine_info_names_the_machine_the_software_and_the_load() -> None:
    from trajstore.trainer.apps.learning_bench.provenance import describe, finish, machine_info

    info = machine_info()
    assert info["cpu"] and info["logical_cpus"] >= 1 and 1 <= info["affinity_cpus"] <= info["logical_cpus"]
    assert info["torch"] and info["python"] and info["started_utc"].endswith("Z")
    assert info["commit"]  # the tests run from a git checkout
    assert len(info["load_start"]) == 3
    done = finish({**info, "cpu_seconds_jobs": 1200.0, "processes": 2}, 61.0)
    assert done["wall_seconds"] == 61.0 and len(done["load_end"]) == 3
    line = describe(done)
    assert "CPUs usable" in line and "load" in line and f"commit {info['commit']}" in line
    assert "jobs' CPU time 20.0 min, i.e. about 10.0 min of wall time on 2 idle cores" in line
    # a loaded machine's CPU time is no idle figure: the line says the wall-time figure is an estimate
    cpus = done["affinity_cpus"]
    idle = describe({**done, "load_start": [0.1, 0.1, 0.1], "load_end": [cpus - 0.5, 0.1, 0.1]})
    busy = describe({**done, "load_start": [0.1, 0.1, 0.1], "load_end": [cpus + 2.0, 0.1, 0.1]})
    assert "not an idle measurement" not in idle and "an estimate, not an idle measurement" in busy
