"""``traj serve``: an OpenAI-compatible server over a transformers causal LM (CPU or CUDA), and
the generation engine behind it.

It answers ``/v1/chat/completions`` and ``/v1/completions`` (streaming or not) and
``/v1/models`` in vLLM's shape, including vLLM's extensions for RL: ``return_token_ids`` (the
sampled ``token_ids`` per choice and the ``prompt_token_ids``), per-token ``logprobs``,
``allowed_token_ids``, ``stop_token_ids``, ``guided_choice`` (also as ``structured_outputs.choice``).
Like SGLang it reports the weight version
(``metadata.weight_version``; ``GET /model_info``) and reloads weights with
``POST /update_weights_from_disk {"model_path": ..., "weight_version": ...}``. It is the rollout
server of ``traj demo`` and of the proxy's tests on machines without vLLM or SGLang; it is not
a high-throughput server (static batching, no paged attention).

Extensions of its own, used by ``traj proxy``: every choice carries ``weight_version_spans``
(``[[start, end, version], ...]`` over its generated tokens, so a call that crossed a reload
in ``retract`` mode says where), and ``--sample-log`` appends every generation to a JSONL file.
Log-probs describe the distribution each token was drawn from (temperature, top-k, top-p
applied), which is what ``traj train`` expects for its importance ratios.

Where each part lives: ``serve.py`` (load the model, run the server), ``config.py`` (its options),
``routes.py`` (the HTTP routes), ``completions.py`` (the generation endpoints), ``request.py`` and
``response.py`` (parsing a call, shaping an answer), ``chat.py`` (chat template and tool calls),
``state.py`` (what the endpoints share), ``engine.py`` (batched sampling in one worker thread) and
``weights.py`` (loading published weights into the served model: ``/update_weights_from_disk``).
"""
