"""``traj bench throughput``: what asynchrony buys in wall-clock time on the real topology
(``traj serve`` -> ``traj proxy`` -> store -> ``traj train --follow``, a tiny random model so that
the environment's latency dominates), against a synchronous batch barrier, and what it costs in
staleness. Modules: ``trace.py`` (the paired latency trace), ``forkjoin.py`` (the model's
prediction), ``config.py`` (arms, grid, presets), ``agent.py`` (one episode through the proxy),
``arms.py`` (when each arm starts its episodes), ``topology.py`` (the processes), ``measure.py``
(reading the store back, the staleness check), ``result.py``, ``run.py`` (one arm),
``suite.py`` (the grid, one command) and ``report.py`` (median and range over seeds)."""

from trajstore.trainer.apps.throughput.config import Arm, ThroughputConfig, ThroughputError
from trajstore.trainer.apps.throughput.trace import EnvSpec, LatencyTrace

__all__ = ["Arm", "EnvSpec", "LatencyTrace", "ThroughputConfig", "ThroughputError"]
