"""Applications built on the trainer and the store: the rollout worker, the environments, `traj demo` and `traj bench learning`."""
