"""The `traj` command line."""
