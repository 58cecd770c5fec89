"""What counts as a secret: the detectors (detect-secrets' plugins for keys and tokens, trajstore's
documented patterns for e-mail addresses, private-key blocks and API-key headers, the user's own
patterns), the allow-list, and :func:`Rules.find` that returns each secret's character range."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from detect_secrets.plugins.aws import AWSKeyDetector
from detect_secrets.plugins.azure_storage_key import AzureStorageKeyDetector
from detect_secrets.plugins.basic_auth import BasicAuthDetector
from detect_secrets.plugins.discord import DiscordBotTokenDetector
from detect_secrets.plugins.github_token import GitHubTokenDetector
from detect_secrets.plugins.gitlab_token import GitLabTokenDetector
from detect_secrets.plugins.high_entropy_strings import Base64HighEntropyString, HexHighEntropyString
from detect_secrets.plugins.jwt import JwtTokenDetector
from detect_secrets.plugins.mailchimp import MailchimpDetector
from detect_secrets.plugins.npm import NpmDetector
from detect_secrets.plugins.openai import OpenAIDetector
from detect_secrets.plugins.private_key import PrivateKeyDetector
from detect_secrets.plugins.pypi_token import PypiTokenDetector
from detect_secrets.plugins.sendgrid import SendGridDetector
from detect_secrets.plugins.slack import SlackDetector
from detect_secrets.plugins.square_oauth import SquareOAuthDetector
from detect_secrets.plugins.stripe import StripeDetector
from detect_secrets.plugins.telegram_token import TelegramBotTokenDetector
from detect_secrets.plugins.twilio import TwilioKeyDetector
from pydantic import BaseModel, ConfigDict, Field, field_validator

KIND_PATTERN = re.compile(r"[a-z][a-z0-9_]{0,39}")
"""A kind's name: what the marker ``[REDACTED:<kind>]`` and every report call the secret."""

MARKER_FORMAT = "[REDACTED:{kind}]"
"""The fixed text that replaces a secret, in token spans (through the trajectory's tokenizer),
metadata and the raw reward."""

DEFAULT_ALLOW: tuple[str, ...] = (
    r"git@(?:github\.com|gitlab\.com|bitbucket\.org)",
    r"openhands@all-hands\.dev",
    r"[^@\s]+@(?:[\w-]+\.)*(?:example\.(?:com|net|org)|[\w-]+\.(?:example|test|invalid))",
)
"""Matches that are no one's personal data although they are e-mail addresses, and that agent logs
are full of: the SSH user of the big code forges (``git clone git@github.com:owner/repo``),
OpenHands' commit author (its system prompt names it), and the domains reserved for examples
(RFC 2606: ``example.com``, ``*.test``, ...). ``RedactConfig.default_allow = False`` drops them."""


MARKER_PREFIX = MARKER_FORMAT.split("{", 1)[0]
"""``[REDACTED:``: a match holding a marker is a redacted secret already, never a new one."""


def marker(kind: str) -> str:
    """``[REDACTED:<kind>]``."""
    return MARKER_FORMAT.format(kind=kind)


class RedactConfig(BaseModel):
    """What ``traj redact`` (and ``traj proxy --redact``) looks for and how it rewrites.

    The built-in detectors are always on (:data:`BUILTIN_KINDS`); `patterns` adds the user's own,
    `allow` exempts matches, `entropy` adds detect-secrets' high-entropy string plugins.
    """

    model_config = ConfigDict(extra="forbid")
    patterns: dict[str, str] = Field(default_factory=dict, description=(
        "extra detectors, kind name -> Python regex; the secret is the group named 'secret', else group 1 "
        "when the regex has groups, else the whole match"))
    allow: list[str] = Field(default_factory=list, description=(
        "regexes of matches to leave alone: a match whose whole text matches one is not a finding"))
    default_allow: bool = Field(True, description="also allow DEFAULT_ALLOW (git@github.com and the like)")
    entropy: bool = Field(False, description=(
        "also flag quoted high-entropy strings (detect-secrets' Base64/Hex HighEntropyString plugins; noisy: "
        "hashes and ids in code are flagged too)"))
    keep_trainable: bool = Field(False, description=(
        "actions whose context changed keep the trajectory trainable (their log-probs were sampled under the "
        "original text); an action that itself held a secret makes it not trainable in any case"))
    tokenizer: str | None = Field(None, description=(
        "tokenizer for trajectories whose tokenizer column is empty (name or path for trajstore.hub.load_tokenizer)"))

    @field_validator("patterns")
    @classmethod
    def _patterns(cls, v: dict[str, str]) -> dict[str, str]:
        for name, rx in v.items():
            if not KIND_PATTERN.fullmatch(name):
                raise ValueError(f"pattern name {name!r} must be 1-40 lower-case letters, digits or _ "
                                 "(starting with a letter): it is written into the marker [REDACTED:<name>]")
            _compile(rx, f"pattern {name}")
        return v

    @field_validator("allow")
    @classmethod
    def _allow(cls, v: list[str]) -> list[str]:
        for rx in v:
            _compile(rx, "allow")
        return v


def _compile(rx: str, what: str, flags: int = 0) -> re.Pattern[str]:
    try:
        return re.compile(rx, flags)
    except re.error as e:
        raise ValueError(f"{what}: {rx!r} is not a valid regex ({e})") from None


@dataclass(frozen=True)
class Detector:
    """One regex that finds one kind of secret.

    Attributes:
        kind: the secret's kind (:data:`KIND_PATTERN`).
        pattern: the compiled regex.
        group: the group holding the secret (0 = the whole match).
        check: further test of the secret's text (e.g. a JWT's parts decode); None = none.
        needle: literals (lower case) one of which every match contains, ignoring case, to skip
            texts quickly; None = always run.
        origin: where the rule comes from (``detect-secrets AWSKeyDetector``, ``trajstore``, ``--pattern``).
        rank: which kind names overlapping matches (lowest wins): 0 a token of a known format (or a
            user pattern), 1 a secret known by its context (a URL's password, ``api_key = ...``),
            2 an e-mail address (``user:password@host`` looks like one), 3 high entropy.
    """

    kind: str
    pattern: re.Pattern[str]
    group: int | str = 0
    check: Callable[[str], bool] | None = None
    needle: tuple[str, ...] | None = None
    origin: str = "trajstore"
    rank: int = 0


@dataclass(frozen=True)
class Match:
    """A secret in a text: characters ``[start, end)`` of kind `kind` (`rank`: see :class:`Detector`)."""

    start: int
    end: int
    kind: str
    rank: int = 0


def _needles(spec: str | None) -> tuple[str, ...] | None:
    """``"a|b"`` -> ``("a", "b")``, lower-cased (the needles of a :class:`Detector`)."""
    return None if spec is None else tuple(spec.lower().split("|"))


def _has_letter_and_digit(value: str) -> bool:
    return any(c.isdigit() for c in value) and any(c.isalpha() for c in value)


# Our own patterns, each from the format's documentation.
_EMAIL = re.compile(r"(?:(?<![\w.%+\-\\])|(?<=\\[nrt]))[A-Za-z0-9][A-Za-z0-9._%+-]{0,63}@[A-Za-z0-9](?:[A-Za-z0-9-]{0,62}"
                    r"[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,62}[A-Za-z0-9])?)*\.[A-Za-z]{2,24}(?![\w-])")
"""RFC 5321 addresses in their common form (dot-atom local part, DNS host name with a letter TLD).
The local part starts after a non-word character, or after a JSON escape (``\\n``), but not after
another backslash: ``\\n@dataclass.define`` in escaped code is no address."""
_PRIVATE_KEY = re.compile(
    r"-----BEGIN ((?:[A-Z0-9]+ )*)PRIVATE KEY((?: BLOCK)?)-----"
    r"(?:.{0,16384}?-----END \1PRIVATE KEY\2-----|(?:[A-Za-z0-9+/=:,\- \t\r\n]|\\[rn])*)", re.S)
"""A PEM / OpenSSH / PGP private-key block (RFC 7468): header to footer, or, when the footer is
missing (an output cut short), the header and the base64 body that follows it."""
_SECRET_NAMES = ("secret", "token", "password", "passwd", "private_key", "private-key", "privatekey", "access_key",
                 "access-key", "accesskey")
_SECRET_ASSIGNMENT = (
    r"(?i)[:=](?:" + "|".join(f"(?<={re.escape(w + q)}[:=])" for w in _SECRET_NAMES for q in ("", '"', "'", " "))
    + r")\s*[\"']?([A-Za-z0-9][^\s\"'`,;@&<>(){}\[\]]{7,})")
"""``GITHUB_TOKEN=...``, ``"password": "..."``, ``secret_key: ...``: a value after a name ending in one
of :data:`_SECRET_NAMES`. Written as ``[:=]`` then a look back at the name, so the regex scans for
the rare ``:`` / ``=`` instead of trying every position (7x faster on agent logs)."""
_OWN: tuple[tuple[str, str, int, str | None, Callable[[str], bool] | None, int], ...] = (
    # kind, regex, group, needle, check, rank
    ("google_api_key", r"(?<![\w-])AIza[0-9A-Za-z_\-]{35}(?![\w-])", 0, "AIza", None, 0),
    ("anthropic_key", r"sk-ant-(?:api|admin|sid)\d\d-[A-Za-z0-9_\-]{20,}", 0, "sk-ant-", None, 0),
    ("huggingface_token", r"(?<![A-Za-z0-9_])hf_[A-Za-z0-9]{34}(?![A-Za-z0-9])", 0, "hf_", None, 0),
    # a value after a telling name (header, key, variable): starts with a letter or digit (not $VAR,
    # <placeholder>, {{template}}) and holds both letters and digits (not a word or a number)
    ("x_api_key", r"(?i)\bx-api-key\b[\"']?\s*[:=]\s*[\"']?([A-Za-z0-9][A-Za-z0-9._~+/=\-]{7,})", 1, "x-api-key",
     None, 1),
    ("authorization_header", r"(?i)\bauthorization\b[\"']?\s*[:=]\s*[\"']?(?:bearer|token|basic)\s+"
     r"([A-Za-z0-9][A-Za-z0-9._~+/=\-]{7,})", 1, "authorization", None, 1),
    ("api_key", r"(?i)api[_-]?key[\"']?\s*[:=]\s*[\"']?([A-Za-z0-9][A-Za-z0-9._~+/=\-]{15,})", 1, "api",
     _has_letter_and_digit, 1),
    ("secret_assignment", _SECRET_ASSIGNMENT, 1, None, _has_letter_and_digit, 1),
)


def _detect_secrets_detectors() -> list[Detector]:
    """Detectors from detect-secrets' regex plugins: each plugin's own ``denylist`` regexes, the
    secret in the group that holds it (the whole match unless said), named by a kind.

    Left out: Artifactory (``AP`` + 9 letters matches plain words), public IPs (not secrets),
    keyword assignments (Cloudant, IBM Cloud, SoftLayer, KeywordDetector: slow on long texts and
    noisy on code; ``api_key`` below covers key assignments); the high-entropy plugins are opt-in."""

    out: list[Detector] = []

    def add(kind: str, plugin: Any, groups: Mapping[int, int] | None = None, needle: str | None = None,
            rank: int = 0) -> None:
        # groups: denylist index -> the group holding the secret. GitHub's and GitLab's regexes
        # capture only the token's prefix (ghp), so their whole match is the secret.
        for i, rx in enumerate(plugin.denylist):
            g = (groups or {}).get(i, 0)
            out.append(Detector(kind, rx, g if g <= rx.groups else 0, needle=_needles(needle),
                                origin=f"detect-secrets {plugin.__name__}", rank=rank))

    add("aws_access_key", AWSKeyDetector, {1: 1})
    add("azure_storage_key", AzureStorageKeyDetector, needle="AccountKey=")
    add("basic_auth", BasicAuthDetector, {0: 1}, needle="://", rank=1)
    add("discord_token", DiscordBotTokenDetector)
    add("github_token", GitHubTokenDetector, needle="_")
    add("gitlab_token", GitLabTokenDetector)
    add("mailchimp_key", MailchimpDetector, needle="-us")
    add("npm_token", NpmDetector, {0: 1}, needle="_authToken")
    add("openai_key", OpenAIDetector, needle="T3BlbkFJ")
    add("pypi_token", PypiTokenDetector, needle="pypi-")
    add("sendgrid_key", SendGridDetector, needle="SG.")
    add("slack_token", SlackDetector)
    add("square_oauth", SquareOAuthDetector, needle="sq0csp-")
    add("stripe_key", StripeDetector, needle="k_live_")
    add("telegram_token", TelegramBotTokenDetector, needle=":")
    add("twilio_key", TwilioKeyDetector)
    # detect-secrets' JWT regex ends lazily (`*?`), so its match stops before the signature:
    # the same regex, greedy, and the plugin's own check that the parts decode.
    jwt = JwtTokenDetector.denylist[0].pattern
    out.append(Detector("jwt", re.compile(jwt[:-1] if jwt.endswith("*?") else jwt),
                        check=JwtTokenDetector.is_formally_valid, needle=("eyj",), origin="detect-secrets JwtTokenDetector"))
    # The plugin finds the header line only; the block is ours (RFC 7468), checked against its headers.
    out.append(Detector("private_key", _PRIVATE_KEY, check=lambda v: any(rx.search(v) for rx in PrivateKeyDetector.denylist),
                        needle=("private key",), origin="detect-secrets PrivateKeyDetector + trajstore"))
    return out


def _entropy_detectors() -> list[Detector]:
    """detect-secrets' high-entropy string plugins (quoted strings of the charset whose Shannon
    entropy is above the plugin's default limit)."""

    out = []
    for kind, plugin in (("base64_high_entropy", Base64HighEntropyString()), ("hex_high_entropy", HexHighEntropyString())):
        out.append(Detector(kind, plugin.regex, 2, check=lambda v, p=plugin: p.calculate_shannon_entropy(v) > p.entropy_limit,
                            origin=f"detect-secrets {type(plugin).__name__}", rank=3))
    return out


def builtin_detectors(*, entropy: bool = False) -> list[Detector]:
    """The built-in detectors (the high-entropy ones with `entropy`), in the order they are tried."""
    own = [Detector(k, re.compile(rx), g, check, _needles(needle), rank=rank)
           for k, rx, g, needle, check, rank in _OWN]
    return [*_detect_secrets_detectors(), Detector("email", _EMAIL, needle=("@",), rank=2),
            *own, *(_entropy_detectors() if entropy else [])]


BUILTIN_KINDS: tuple[str, ...] = tuple(dict.fromkeys(d.kind for d in builtin_detectors(entropy=True)))
"""Every kind a built-in detector reports (``*_high_entropy`` only with ``entropy``)."""


def user_detector(name: str, rx: str) -> Detector:
    """The detector of ``--pattern NAME=REGEX``: the secret is group ``secret`` if the regex names
    one, else group 1 if it has groups, else the whole match.

    Raises:
        ValueError: `rx` is not a valid regex.
    """
    pattern = _compile(rx, f"pattern {name}")
    group: int | str = "secret" if "secret" in pattern.groupindex else (1 if pattern.groups else 0)
    return Detector(name, pattern, group, origin="--pattern")


class Rules:
    """The compiled detectors and allow-list of a :class:`RedactConfig`."""

    def __init__(self, config: RedactConfig | None = None):
        self.config = config or RedactConfig()
        self.detectors: list[Detector] = [*builtin_detectors(entropy=self.config.entropy),
                                          *(user_detector(n, rx) for n, rx in self.config.patterns.items())]
        allow = [*self.config.allow, *(DEFAULT_ALLOW if self.config.default_allow else ())]
        self._allow = [re.compile(rx) for rx in allow]

    def allowed(self, value: str) -> bool:
        """Whether an allow-list regex matches the whole of `value`."""
        return any(rx.fullmatch(value) for rx in self._allow)

    def find(self, text: str) -> list[Match]:
        """Every secret in `text`, in order, overlapping matches merged (the first one's kind).

        Returns:
            Non-overlapping :class:`Match` es sorted by start; character offsets into `text`.
        """
        found: list[Match] = []
        lower = text.lower()
        for d in self.detectors:
            if d.needle is not None and not any(n in lower for n in d.needle):
                continue
            for m in d.pattern.finditer(text):
                s, e = m.span(d.group)
                if s < 0 or e <= s:
                    continue
                value = text[s:e]
                if MARKER_PREFIX in value or (d.check is not None and not d.check(value)) or self.allowed(value):
                    continue
                found.append(Match(s, e, d.kind, d.rank))
        return merge_matches(found)


def merge_matches(matches: Iterable[Match]) -> list[Match]:
    """`matches` sorted by start, each overlapping run merged into one match spanning all of it,
    named by its lowest-rank match (the first of them on a tie: the longer at one start)."""
    out: list[Match] = []
    for m in sorted(matches, key=lambda m: (m.start, -m.end, m.rank)):
        if out and m.start < out[-1].end:
            last = out[-1]
            best = m if m.rank < last.rank else last
            out[-1] = Match(last.start, max(last.end, m.end), best.kind, best.rank)
        else:
            out.append(m)
    return out


def mask(value: str) -> str:
    """A secret as reports show it: its first characters (4 of a long one, which are the key
    type's prefix: AKIA, ghp_, xoxb; 1 of a short one), then how long it is."""
    keep = 4 if len(value) >= 16 else 1
    return f"{value[:keep]}…({len(value)} chars)"


def excerpt(text: str, matches: Sequence[Match], i: int, context: int = 24) -> str:
    """Match `i` of `matches` in `text` with `context` characters either side, every secret in
    the window masked (:func:`mask`) and newlines shown as ``\\n``: ``export K=AKIA…(20 chars)``."""
    m = matches[i]
    lo, hi = max(0, m.start - context), min(len(text), m.end + context)
    parts, pos = [], lo
    for o in matches:
        if o.end <= lo or o.start >= hi:
            continue
        s, e = max(o.start, pos), o.end
        parts.append(text[pos:s])
        parts.append(f"[{o.kind}: {mask(text[o.start:o.end])}]")
        pos = max(pos, e)
    parts.append(text[pos:hi])
    body = "".join(parts).replace("\r", "\\r").replace("\n", "\\n")
    return ("…" if lo > 0 else "") + body + ("…" if hi < len(text) else "")
