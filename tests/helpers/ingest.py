"""Helpers of the ingest tests: SmolLM2's ChatML pieces the expected texts are written with,
ingesting and reading back, what a trajectory holds (decoded spans), and small hand-made inputs.

The expected texts are written by hand from the input files and SmolLM2's ChatML template
(``<|im_start|>{role}\\n{content}<|im_end|>\\n``, generation prompt ``<|im_start|>assistant\\n``;
tool calls flattened as ``<tool_call>\\n{"name": N, "arguments": <the model's JSON verbatim>}\\n
</tool_call>``, reasoning as ``<think>\\n{reasoning}\\n</think>\\n\\n`` before the content; see
:func:`trajstore.ingest.builders.template.template_message`)."""

from __future__ import annotations

import copy
import json
import threading
from pathlib import Path

import numpy as np

from trajstore.ingest import IngestReport, conversation_to_trajectories, iter_trajectories
from trajstore.ingest.builders.template import template_features, template_message, with_tools_text
from trajstore.ingest.discover import InputUnit
from trajstore.ingest.dispatch import parse_unit
from trajstore.ingest.records import EngineRollout, Problem
from trajstore.reader import read_trajectories

# -- ChatML (SmolLM2's template) -------------------------------------------------------------

GEN = "<|im_start|>assistant\n"
"""ChatML's generation prompt: since action spans hold only generated tokens, it ends the span
before each action; the newline after <|im_end|> starts the span after it."""

END = "<|im_end|>"

SMOL_SYSTEM = "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
"""SmolLM2's default system prompt, written by its template when the first message is not a system message."""

SYS = "<|im_start|>system\n{}<|im_end|>\n"
USER = "<|im_start|>user\n{}<|im_end|>\n"
TOOL_OBS = "\n<|im_start|>tool\n{}<|im_end|>\n"
"""An observation after an action: ChatML's separator after <|im_end|>, then the tool turn."""


def call(name: str, raw_args: str) -> str:
    return f'<tool_call>\n{{"name": "{name}", "arguments": {raw_args}}}\n</tool_call>'


def tool_obs(text: str) -> str:
    """An observation after an action: ChatML's separator, the tool turn, the next generation prompt."""
    return f"\n<|im_start|>tool\n{text}{END}\n{GEN}"


# -- ingesting and reading back ----------------------------------------------------------------

def ingest(*paths, **kw):
    r = IngestReport()
    ts = list(iter_trajectories([str(p) for p in paths], report=r, **kw))
    return ts, r


TOK_NAME = "HuggingFaceTB/SmolLM2-135M-Instruct"


def build(tok, path, **kw):
    """(conversation, trajectory) pairs of one input file, each checked against the oracle:
    the ids are the template's render of the whole conversation (tokenized as one text), less
    ChatML's separator ``\\n`` after the last ``<|im_end|>`` when the conversation ends with
    a model call (it belongs to no span: nothing follows)."""
    out = []
    for item in parse_unit(InputUnit(str(path))):
        assert not isinstance(item, Problem), str(item)
        if isinstance(item, EngineRollout):
            out.append((item, None))
            continue
        conv = copy.deepcopy(item)
        ts = conversation_to_trajectories(item, tok, tokenizer_name=TOK_NAME, input_format=item.source, **kw)
        if len(ts) > 1:  # one trajectory per context the model saw: checked by the fidelity tests
            out += [(conv, t) for t in ts]
            continue
        (t,) = ts
        features = template_features(tok)
        full = tok.apply_chat_template(with_tools_text([template_message(m, features) for m in item.messages],
                                                       item.tools), tokenize=False)
        if item.messages[-1].role == "assistant":
            assert full.endswith("<|im_end|>\n")
            full = full[:-1]
        assert t.tokens.tolist() == tok(full, add_special_tokens=False)["input_ids"], \
            f"{path}: ids differ from the template render"
        assert t.token_source == "retokenized" and t.logprob_source == "none"
        assert all(s.policy_version is None for s in t.spans) and np.isnan(t.action_logprobs).all()
        # actions hold the generated text and its end of turn; observations start with the
        # separator after an action, then their role header
        for s in t.spans:
            text = tok.decode(t.tokens[s.start:s.end].tolist())
            if s.kind == "action":
                assert not text.startswith("<|im_start|>") and text.endswith("<|im_end|>"), text[-40:]
            elif s.kind == "observation" and s.role is not None:
                assert text.lstrip("\n").startswith(f"<|im_start|>{s.role}\n"), text[:40]
        out.append((conv, t))
    return out


def only_row(store) -> dict:
    (row,) = read_trajectories(str(store)).to_pylist()
    return row


# -- what a trajectory holds --------------------------------------------------------------------

def decoded(tok, t) -> list[tuple[str, str]]:
    return [(s.kind, tok.decode(t.tokens[s.start:s.end].tolist())) for s in t.spans]


def span_texts(t, tok) -> list[tuple[str, str]]:
    """(kind, decoded text) of every span of a stored row (a dict) or Trajectory."""
    tokens = t["tokens"] if isinstance(t, dict) else t.tokens.tolist()
    spans = t["spans"] if isinstance(t, dict) else [s.model_dump() for s in t.spans]
    return [(s["kind"], tok.decode(tokens[s["start"]:s["end"]])) for s in spans]


def kinds(t) -> str:
    return "".join(s.kind[0] for s in t.spans)


def action_logprobs(row) -> list[float]:
    """Engine log-probs of the action tokens in order (schema v1 stores them full length)."""
    lps = row["action_logprobs"]
    if len(lps) == len(row["tokens"]):
        return [lps[i] for s in row["spans"] if s["kind"] == "action" for i in range(s["start"], s["end"])]
    return lps


def assert_each_once_in_order(text: str, pieces: list[str]) -> None:
    """Every piece occurs in `text` exactly once, in this order: nothing dropped or duplicated."""
    pos = 0
    for p in pieces:
        assert text.count(p) == 1, f"{p[:60]!r} occurs {text.count(p)} times"
        at = text.find(p)
        assert at >= pos, f"{p[:60]!r} out of order"
        pos = at + len(p)


def assert_linked(t) -> None:
    """Each tool observation answers a call issued by an earlier action of the trajectory."""
    issued: set[str] = set()
    for s in t.spans:
        if s.kind == "action":
            issued.update(s.tool_call_ids or [])
        elif s.kind == "observation" and s.role == "tool":
            assert s.cause_id in issued, s.cause_id


# -- hand-made inputs (a SWE-smith row) -------------------------------------------------------

CHAT = [{"role": "system", "content": "You are a coding agent."}, {"role": "user", "content": "Fix it."},
        {"role": "assistant", "content": "ls"}, {"role": "user", "content": "src tests"},
        {"role": "assistant", "content": "Done."}]


def smith_row(n: int, **kw) -> dict:
    """A SWE-smith row (messages as a JSON string), trajectory ``t<n>``."""
    return {"messages": json.dumps(CHAT), "instance_id": f"demo__lib.{n}", "resolved": True, "model": "m",
            "traj_id": f"t{n}", "patch": "diff", **kw}


def write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def by_line(rep) -> dict:
    return {(Path(p.origin.path).name, p.origin.line): p for p in rep.problems}


def stored(store) -> list[dict]:
    return read_trajectories(str(store), dedupe=False).to_pylist()


def run_with_deadline(fn, seconds: float = 60.0):
    """Run `fn` in a thread; fail (instead of hanging the suite) when it blocks past `seconds`."""
    out: dict = {}

    def target() -> None:
        try:
            out["v"] = fn()
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller
            out["e"] = e
    th = threading.Thread(target=target, daemon=True)
    th.start()
    th.join(seconds)
    assert not th.is_alive(), f"blocked for more than {seconds} s"
    if "e" in out:
        raise out["e"]
    return out["v"]


def nemo_row(q: str, gen: list[int]) -> dict:
    """A NeMo Gym rollout row: user question `q`, one output message with engine ids `gen`."""
    return {"responses_create_params": {"input": [{"role": "user", "content": q}]},
            "response": {"output": [{"id": "o1", "type": "message", "generation_token_ids": gen,
                                     "generation_log_probs": [-0.5] * len(gen), "prompt_token_ids": [1, 2]}]},
            "reward": 1.0}
