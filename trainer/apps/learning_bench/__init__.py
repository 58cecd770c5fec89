"""The learning benchmark (``traj bench learning``, ``bench/learning.py``): tiny random-init
transformers learn small multi-turn tasks from scratch through the real pipeline (writer SDK ->
store -> trainer -> published versions -> lagged rollout worker), one run per arm, task,
staleness and seed. :mod:`.codec` is torch-free (the tasks are in :mod:`trajstore.trainer.apps.envs`); :mod:`.harness` runs.
"""
