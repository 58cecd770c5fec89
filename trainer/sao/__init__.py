"""The SAO math, pure torch: advantages (skip-observation GAE), baselines, losses (DIS, PPO clip, value), per-token log-probs, and their typed results (docs/sao.md; arXiv 2607.07508)."""
