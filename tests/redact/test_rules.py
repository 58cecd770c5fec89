"""What the detectors find (trajstore/redact/rules.py): each kind at its exact character range,
the allow-list, user patterns, overlaps, masking, and the code and log text that must not match."""

from __future__ import annotations

import pytest

from tests.helpers.secrets import SECRETS, action_text, observation_text, prompt_text
from trajstore.redact.rules import BUILTIN_KINDS, Match, RedactConfig, Rules, excerpt, mask, merge_matches


@pytest.fixture(scope="module")
def rules() -> Rules:
    return Rules()


@pytest.mark.parametrize("kind, text", [
    ("aws_access_key", "export AWS_ACCESS_KEY_ID={}\n"),
    ("google_api_key", "maps?key={}&q=x"),
    ("github_token", "token {} here"),
    ("slack_token", "SLACK: {}"),
    ("stripe_key", "stripe.api_key = '{}'"),
    ("openai_key", "key {} end"),
    ("jwt", "Cookie: session={}; path=/"),
    ("private_key", "cat id_rsa\n{}\n$ "),
    ("email", "Contact: {} (on call)"),
])
def test_each_kind_is_found_at_its_exact_range(rules, kind, text):
    secret = SECRETS[kind]
    s = text.format(secret)
    start = s.index(secret)
    assert rules.find(s) == [Match(start, start + len(secret), kind, rules.find(s)[0].rank)]


@pytest.mark.parametrize(("text", "kind", "secret"), [
    (f"-H 'x-api-key: {SECRETS['x_api_key']}'", "x_api_key", SECRETS["x_api_key"]),
    ("Authorization: Bearer 9f8e7d6c5b4a39281706f5e4d3c2b1a0", "authorization_header",
     "9f8e7d6c5b4a39281706f5e4d3c2b1a0"),
    (f'llm:\n  api_key: {SECRETS["api_key"]}\n', "api_key", SECRETS["api_key"]),
    ("export GITHUB_TOKEN=abc123def456ghi\n", "secret_assignment", "abc123def456ghi"),
    # an IP host is no e-mail domain: the password alone
    ("https://deploy:hunter2x@10.0.0.5/repo", "basic_auth", "hunter2x"),
])
def test_context_kinds_take_the_value_only(rules, text: str, kind: str, secret: str):
    # the header name, the URL's user and host, the key name stay; only the value is the secret
    (m,) = rules.find(text)
    assert (m.kind, text[m.start:m.end]) == (kind, secret)


def test_the_fixture_texts_hold_every_kind(rules):
    found = {m.kind for t in (prompt_text(), action_text(), observation_text()) for m in rules.find(t)}
    assert found == set(SECRETS) - {"api_key"}  # the api_key sits in the metadata
    assert set(SECRETS) <= set(BUILTIN_KINDS)


@pytest.mark.parametrize("text", [
    "git clone git@github.com:owner/repo.git",          # default allow-list
    "Co-authored-by: openhands <openhands@all-hands.dev>",
    "mail test@example.com and bot@ci.test",
    'new_text":"import attrs\\n\\n@attrs.define(slots=True)',  # a decorator after an escaped newline
    "@dataclasses.dataclass\nclass A: pass",
    "token_source: retokenized, max_tokens: 1024, tokenizer: HuggingFaceTB/SmolLM2-135M-Instruct",
    "password = get_password(user)",                    # no digit: a name, not a value
    "export OPENAI_API_KEY=$OPENAI_API_KEY; api_key=${API_KEY_2}",
    "sha 3f2a9c1b7e4d5a6f8b9c0d1e2f3a4b5c6d7e8f90 and uuid 123e4567-e89b-12d3-a456-426614174000",
])
def test_ordinary_text_of_agent_logs_is_not_a_secret(rules, text):
    assert rules.find(text) == []


def test_an_escaped_newline_does_not_hide_an_address(rules):
    s = 'echo "a\\njane.doe@acme-robotics.io"'
    (m,) = rules.find(s)
    assert s[m.start:m.end] == "jane.doe@acme-robotics.io"


def test_allow_list_and_default_allow_switch():
    s = "key AKIAQ3EGRXTW5PL7MNZA and git@github.com"
    assert [m.kind for m in Rules(RedactConfig(allow=["AKIA[0-9A-Z]{16}"])).find(s)] == []
    assert [m.kind for m in Rules(RedactConfig(allow=["AKIA"])).find(s)] == ["aws_access_key"]  # whole text only
    assert [m.kind for m in Rules(RedactConfig(default_allow=False)).find(s)] == ["aws_access_key", "email"]


def test_user_patterns_take_the_secret_group_or_group_1_or_the_whole_match():
    cfg = RedactConfig(patterns={"ticket": r"TCK-\d{6}", "emp": r"employee (\d{5})",
                                 "pin": r"pin(?P<sep>[:=])(?P<secret>\d{4})"})
    s = "TCK-123456 by employee 48213, pin=9931"
    got = [(m.kind, s[m.start:m.end]) for m in Rules(cfg).find(s)]
    assert got == [("ticket", "TCK-123456"), ("emp", "48213"), ("pin", "9931")]


@pytest.mark.parametrize("patterns, allow, message", [
    ({"Bad Name": "x"}, [], "pattern name 'Bad Name'"),
    ({"ok": "(unclosed"}, [], "pattern ok: '(unclosed' is not a valid regex"),
    ({}, ["[z-a]"], "allow: '[z-a]' is not a valid regex"),
])
def test_bad_patterns_are_refused_with_their_name(patterns, allow, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace("[", r"\[")):
        RedactConfig(patterns=patterns, allow=allow)


def test_overlapping_matches_merge_under_the_most_specific_kind():
    # a GitHub token used as a URL password: one match, named for the token
    got = merge_matches([Match(10, 50, "basic_auth", 1), Match(10, 50, "github_token", 0), Match(60, 70, "email", 2),
                         Match(65, 80, "basic_auth", 1)])
    assert got == [Match(10, 50, "github_token", 0), Match(60, 80, "basic_auth", 1)]


def test_a_marker_is_never_a_new_finding(rules):
    assert rules.find("export GITHUB_TOKEN=[REDACTED:github_token] x-api-key: [REDACTED:x_api_key]") == []


def test_masks_and_excerpts_never_show_the_secret(rules):
    s = observation_text()
    found = rules.find(s)
    for i in range(len(found)):
        e = excerpt(s, found, i)
        assert not any(v in e for v in SECRETS.values()), e
    assert mask(SECRETS["aws_access_key"]) == "AKIA…(20 chars)"
    assert mask("hunter2x") == "h…(8 chars)"
