"""`traj serve`: an OpenAI-compatible server over a transformers causal LM, and the generation engine behind it."""
