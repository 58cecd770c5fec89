"""SAO trainer: pure math (advantages, losses, log-probs) and the streaming training loop."""
