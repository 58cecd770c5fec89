"""``traj demo``: the whole asynchronous loop on real model output, on one machine.

The real topology, as child processes: ``traj serve`` samples, ``traj proxy`` records every
call into a local store and has the server load each version the trainer publishes, and the
trainer (``traj train --follow``) consumes trajectories as they arrive. Agents in this process
play guess-the-number through the proxy with the official ``openai`` client. At the end the
staleness and clip audits, the reward per policy version and the critic's explained variance
are read back from the store with DuckDB and returned as data (``traj demo`` renders them).
This process never imports torch.

Where each part lives: ``run.py`` (the run, start to end), ``config.py`` (its sizes and files),
``children.py`` (starting, waiting for and stopping the child processes), ``agent.py`` (one
episode), ``trainer_child.py`` (the trainer process), ``audits.py`` (reading the audits back),
``result.py`` (what a run returns, and why it stopped early), ``proxy_shutdown.py`` (what the proxy
reported when it was stopped), ``prune.py`` (freeing superseded weights).
"""

from trajstore.trainer.apps.demo.children import DemoError
from trajstore.trainer.apps.demo.config import DEFAULT_STORE, DemoConfig
from trajstore.trainer.apps.demo.prune import prune_weights
from trajstore.trainer.apps.demo.result import DemoResult, DemoStop, result_to_dict
from trajstore.trainer.apps.demo.run import run_demo

__all__ = ["DEFAULT_STORE", "DemoConfig", "DemoError", "DemoResult", "DemoStop", "prune_weights", "result_to_dict", "run_demo"]
