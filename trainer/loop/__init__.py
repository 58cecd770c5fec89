"""The streaming trainer (`traj train`): typed config, the training loop, checkpoints with the data cursor, run records, published weights, distributed strategies and the memory plan."""
