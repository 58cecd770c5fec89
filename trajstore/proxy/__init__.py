"""``traj proxy``: an OpenAI-compatible recording proxy in front of vLLM, SGLang or ``traj serve``.

Point a harness's base URL at ``http://127.0.0.1:PORT/s/<session>/v1`` and every model call is
forwarded upstream and recorded as an action span with the exact sampled token ids, the
engine's log-probs and the policy version that produced them; the tokens between calls become
observation spans; episodes end with ``POST /s/<session>/finish``. With ``follow_run`` the
upstream loads every policy version the trainer publishes, and ``max_staleness`` bounds how far
rollouts run ahead of training. Torch-free: FastAPI on uvicorn, httpx to the upstream.
"""

from trajstore.proxy.config import ProxyConfig
from trajstore.proxy.recorder import PROXY_SOURCE

__all__ = ["PROXY_SOURCE", "ProxyConfig", "create_app", "run_proxy"]


def __getattr__(name: str):  # the app pulls in FastAPI and httpx (the `proxy` extra) only when used
    if name in ("create_app", "run_proxy"):
        from trajstore.proxy import app  # FastAPI and httpx load here, on first use

        return getattr(app, name)
    raise AttributeError(name)
