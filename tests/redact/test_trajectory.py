"""One trajectory scanned and rewritten (trajstore/redact/trajectory.py): every secret found where
it is, replaced by its marker through SmolLM2's tokenizer, spans shifted, log-probs still on their
action tokens, trainability and the metadata record as redaction requires."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.helpers.secrets import (
    SECRETS,
    action_text,
    clean_action_text,
    clean_trajectory,
    observation_text,
    prompt_text,
    secret_trajectory,
)
from trajstore.convert import table_to_trajectories, trajectories_to_table
from trajstore.redact import REDACTION_KEY, RedactConfig, Redactor
from trajstore.redact.rules import marker
from trajstore.validate import find_violations


@pytest.fixture(scope="module")
def tok(smol_tokenizer):
    return smol_tokenizer


@pytest.fixture(scope="module")
def redactor() -> Redactor:
    return Redactor()


def _texts(tok, t) -> list[str]:
    return [tok.decode(np.asarray(t.tokens)[s.start:s.end].tolist(), skip_special_tokens=False) for s in t.spans]


def test_scan_finds_every_secret_where_it_is(tok, redactor):
    t = secret_trajectory(tok)
    scan = redactor.scan(t)
    assert scan.unscanned is None
    got = [(f.location, f.kind) for f in scan.findings]
    assert got == [
        ("span 0 (prompt)", "aws_access_key"), ("span 0 (prompt)", "google_api_key"), ("span 0 (prompt)", "email"),
        ("span 2 (observation)", "slack_token"), ("span 2 (observation)", "stripe_key"),
        ("span 2 (observation)", "openai_key"), ("span 2 (observation)", "jwt"), ("span 2 (observation)", "x_api_key"),
        ("span 2 (observation)", "basic_auth"), ("span 2 (observation)", "private_key"),
        ("span 3 (action)", "github_token"),
        ("metadata /llm_config/api_key", "api_key"), ("metadata /user/email", "email"),
        ("reward_raw /reviewer", "email"),
    ]
    for f in scan.findings:
        assert not any(v in f.excerpt for v in SECRETS.values()), f.excerpt
        if f.where == "span":  # the token range covers the secret: its tokens decode to text holding it
            covered = tok.decode(np.asarray(t.tokens)[f.tokens[0]:f.tokens[1]].tolist(), skip_special_tokens=False)
            span = t.spans[f.span]
            assert span.start <= f.tokens[0] < f.tokens[1] <= span.end
            assert SECRETS.get(f.kind, "") in covered


def test_redact_replaces_each_secret_by_its_marker_and_keeps_every_other_character(tok, redactor):
    t = secret_trajectory(tok)
    r = redactor.redact(t)
    new = r.trajectory
    assert find_violations(new) == []
    texts = _texts(tok, new)
    m = marker
    assert texts[0] == (prompt_text().replace(SECRETS["aws_access_key"], m("aws_access_key"))
                        .replace(SECRETS["google_api_key"], m("google_api_key")).replace(SECRETS["email"], m("email")))
    assert texts[2] == (observation_text().replace(SECRETS["slack_token"], m("slack_token"))
                        .replace(SECRETS["stripe_key"], m("stripe_key")).replace(SECRETS["openai_key"], m("openai_key"))
                        .replace(SECRETS["jwt"], m("jwt")).replace(SECRETS["x_api_key"], m("x_api_key"))
                        # the URL's password and host read as an e-mail address too: both go
                        .replace(SECRETS["basic_auth"] + "@git.acme-robotics.io", m("basic_auth"))
                        .replace(SECRETS["private_key"], m("private_key")))
    # the token in the tool call's arguments, with the '@github.com' after it (an address's shape)
    assert texts[3] == action_text().replace(SECRETS["github_token"] + "@github.com", m("github_token"))
    assert texts[1] == clean_action_text(1) and texts[5] == clean_action_text(3)
    dump = json.dumps([texts, new.metadata, new.reward_raw])
    assert not any(v in dump for v in SECRETS.values())
    assert new.metadata["llm_config"] == {"model": "gpt-x", "api_key": m("api_key")}
    assert json.loads(new.reward_raw) == {"passed": True, "reviewer": m("email")}
    assert [len(c.record()) for c in r.changes] and all("excerpt" not in c.record() for c in r.changes)


def test_spans_shift_and_log_probs_stay_on_their_action_tokens(tok, redactor):
    t = secret_trajectory(tok)
    new = redactor.redact(t).trajectory
    old_lp, new_lp = np.asarray(t.action_logprobs), np.asarray(new.action_logprobs)
    assert [s.kind for s in new.spans] == [s.kind for s in t.spans]
    assert new.spans[0].start == 0 and new.spans[-1].end == len(new.tokens)
    assert all(a.end == b.start for a, b in zip(new.spans, new.spans[1:]))
    for k in (1, 4, 5):  # spans without a secret: same tokens and log-probs, shifted
        a, b = t.spans[k], new.spans[k]
        assert np.array_equal(np.asarray(t.tokens)[a.start:a.end], np.asarray(new.tokens)[b.start:b.end])
        assert np.array_equal(old_lp[a.start:a.end], new_lp[b.start:b.end], equal_nan=True)
    # the action that held the token: its log-probs before and after the replaced tokens are its
    # own (-0.01 * (1 + position in the action)), the marker's tokens have none
    (c,) = [c for c in redactor.redact(t).changes if c.where == "span" and c.span == 3]
    a, b = t.spans[3], new.spans[3]
    lp = new_lp[b.start:b.end]
    head = c.tokens[0] - a.start
    tail = a.end - c.tokens[1]
    marker_len = c.new_tokens[1] - c.new_tokens[0]
    assert np.allclose(lp[:head], [-0.01 * (i + 1) for i in range(head)])
    assert np.isnan(lp[head:head + marker_len]).all()
    assert np.allclose(lp[head + marker_len:], [-0.01 * (i + 1) for i in range(a.end - a.start - tail, a.end - a.start)])
    assert len(lp) == head + marker_len + tail
    # written and read back: the stored action-aligned log-probs agree with the spans
    (back,) = table_to_trajectories(trajectories_to_table([new]))
    assert np.array_equal(np.asarray(back.action_logprobs), new_lp, equal_nan=True)


def test_an_action_holding_a_secret_makes_the_trajectory_not_trainable_even_with_keep_trainable(tok):
    t = secret_trajectory(tok)
    for keep in (False, True):
        r = Redactor(RedactConfig(keep_trainable=keep)).redact(t)
        assert r.made_not_trainable and r.trajectory.not_trainable_reason.startswith("redacted: 1 action(s) held")
        rec = r.trajectory.metadata[REDACTION_KEY]
        assert rec["redacted_actions"] == [3] and rec["context_changed_actions"] == [1, 5]
        assert rec["keep_trainable"] is keep


def _observation_secret_trajectory(tok):
    """prompt | action | observation with an e-mail address | action: only the last action's context changes."""
    from trajstore import TrajectoryBuilder

    b = TrajectoryBuilder(trajectory_id="obs-1", tokenizer="HuggingFaceTB/SmolLM2-135M-Instruct")
    b.add_prompt(tok.encode(prompt_text().split(" and maps")[0] + "<|im_end|>\n", add_special_tokens=False))
    for k, text in enumerate([clean_action_text(1), f"\nwhoami: {SECRETS['email']}\n", clean_action_text(2)]):
        ids = tok.encode(text, add_special_tokens=False)
        if k % 2:
            b.add_observation(ids)
        else:
            b.add_action(ids, [-0.1] * len(ids), policy_version=0)
    b.set_reward(1.0)
    t = b.finish()
    assert [f.kind for f in Redactor().scan(t).findings] == ["aws_access_key", "email"]
    return t


def test_actions_after_a_change_make_it_not_trainable_unless_kept(tok):
    t = _observation_secret_trajectory(tok)
    r = Redactor().redact(t)
    assert r.made_not_trainable and "context of 2 action(s) changed" in r.trajectory.not_trainable_reason
    kept = Redactor(RedactConfig(keep_trainable=True)).redact(t)
    assert not kept.made_not_trainable and kept.trajectory.not_trainable_reason is None
    assert kept.trajectory.metadata[REDACTION_KEY]["context_changed_actions"] == [1, 3]
    # every action keeps its tokens and its log-probs
    old, new = np.asarray(t.action_logprobs), np.asarray(kept.trajectory.action_logprobs)
    assert np.array_equal(old[~np.isnan(old)], new[~np.isnan(new)])


def test_a_secret_only_in_metadata_changes_no_token(tok, redactor):
    t = clean_trajectory(tok, "m-1").model_copy(update={"metadata": {"env": {"HF_TOKEN": "hf_" + "a1" * 17}}})
    r = redactor.redact(t)
    assert np.array_equal(np.asarray(r.trajectory.tokens), np.asarray(t.tokens))
    assert r.trajectory.not_trainable_reason is None and not r.made_not_trainable
    assert r.trajectory.metadata["env"]["HF_TOKEN"] == "[REDACTED:huggingface_token]"
    assert [c.record() for c in r.changes] == [{"kind": "huggingface_token", "where": "metadata", "path": "/env/HF_TOKEN",
                                                "chars": [0, 37]}]


def test_redacting_twice_finds_nothing_more(tok, redactor):
    once = redactor.redact(secret_trajectory(tok)).trajectory
    assert redactor.scan(once).findings == []
    assert redactor.redact(once) is None
    assert redactor.redact(clean_trajectory(tok, "c-1")) is None


def test_a_trajectory_without_a_tokenizer_is_reported_unscanned_but_its_metadata_is_scrubbed(tok):
    t = secret_trajectory(tok).model_copy(update={"tokenizer": None})
    scan = Redactor().scan(t)
    assert scan.unscanned.startswith("no tokenizer recorded")
    assert {f.where for f in scan.findings} == {"metadata", "reward_raw"}
    r = Redactor().redact(t)
    assert r.unscanned and np.array_equal(np.asarray(r.trajectory.tokens), np.asarray(t.tokens))
    with_tok = Redactor(RedactConfig(tokenizer="HuggingFaceTB/SmolLM2-135M-Instruct")).scan(t)
    assert with_tok.unscanned is None and len(with_tok.findings) == len(Redactor().scan(secret_trajectory(tok)).findings)
    unknown = Redactor().scan(t.model_copy(update={"tokenizer": "org/not-here-7b"}))
    assert "tokenizer 'org/not-here-7b' cannot be loaded" in unknown.unscanned


def test_a_redaction_key_that_is_not_our_record_is_scanned_too(tok, redactor):
    t = clean_trajectory(tok, "k-1").model_copy(update={"metadata": {"redaction": {"owner": SECRETS["email"]}}})
    r = redactor.redact(t)
    assert [c.path for c in r.changes] == ["/redaction/owner"]
    assert SECRETS["email"] not in json.dumps(r.trajectory.metadata)
