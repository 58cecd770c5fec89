"""Only for tests/trainer/test_demo.py, which imports ``_train_synth`` by path; every other test
imports ``tests.helpers``. Delete this file once test_demo.py imports
``tests.helpers.stores.write_synthetic_store`` and ``tests.helpers.trajectories.VOCAB``."""

from tests.helpers.stores import write_synthetic_store
from tests.helpers.trajectories import VOCAB

__all__ = ["VOCAB", "write_synthetic_store"]
