"""SAO trainer: pure math (advantages, losses, log-probs), the streaming training loop, and the
applications built on it and on the store: rollout worker, environments, demo, learning benchmark."""
