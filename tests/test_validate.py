"""Every write-time rule of schema v1 (trajstore/validate.py), each with a record that breaks it.

The base record (hand-built, 6 tokens)::

    tokens   [1, 2, | 3,    4,    5,    | 6]
    spans     prompt | action v=3        | observation
    logprobs [-, -, | -0.1, -0.2, -0.3 | -]     ("-" = null)
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from tests.helpers.trajectories import valid_record
from trajstore import StoreWriter, Trajectory, TrajectoryValidationError, read_trajectories, write_trajectories
from trajstore.validate import TRAJECTORY_ID_MAX_CHARS, check_trajectory_id, find_violations, validate_trajectory

NAN = math.nan


def _base(**update: Any) -> dict[str, Any]:
    d: dict[str, Any] = dict(
        trajectory_id="rule-test",
        source="sdk",
        status="completed",
        token_source="engine",
        logprob_source="engine",
        reward=1.0,
        tokens=[1, 2, 3, 4, 5, 6],
        logprobs=[NAN, NAN, -0.1, -0.2, -0.3, NAN],
        spans=[
            dict(kind="prompt", start=0, end=2),
            dict(kind="action", start=2, end=5, policy_version=3, temperature=1.0, top_p=1.0),
            dict(kind="observation", start=5, end=6),
        ],
    )
    d.update(update)
    return d


def _spans(*triples: tuple[str, int, int], **action_extra: Any) -> list[dict[str, Any]]:
    out = []
    for kind, a, b in triples:
        s: dict[str, Any] = dict(kind=kind, start=a, end=b)
        if kind == "action":
            s.update(policy_version=3, **action_extra)
        out.append(s)
    return out


def test_base_record_is_valid() -> None:
    validate_trajectory(Trajectory(**_base()))


# (case id, fields to change, field the violation must name, fragment of its message)
BROKEN: list[tuple[str, dict[str, Any], str, str]] = [
    ("empty id", dict(trajectory_id=""), "trajectory_id", "non-empty"),
    ("id too long", dict(trajectory_id="a" * (TRAJECTORY_ID_MAX_CHARS + 1)), "trajectory_id", "longer than"),
    ("id with slash", dict(trajectory_id="runs/../../etc"), "trajectory_id", "not safe in a path"),
    ("id dot-dot", dict(trajectory_id=".."), "trajectory_id", "not safe in a path"),
    ("id leading dash", dict(trajectory_id="-rf"), "trajectory_id", "not safe in a path"),
    ("id with space", dict(trajectory_id="a b"), "trajectory_id", "not safe in a path"),
    ("empty source", dict(source=""), "source", "non-empty"),
    ("bad status", dict(status="done"), "status", "'done' is not one of"),
    ("bad token_source", dict(token_source="guess"), "token_source", "'guess' is not one of"),
    ("bad logprob_source", dict(logprob_source="model"), "logprob_source", "'model' is not one of"),
    ("retokenized with engine logprobs", dict(token_source="retokenized"), "logprob_source", "retokenized"),
    ("nan reward", dict(reward=NAN), "reward", "finite or null"),
    ("inf reward", dict(reward=math.inf), "reward", "finite or null"),
    ("logprobs length", dict(logprobs=[NAN, NAN, -0.1, -0.2, -0.3]), "action_logprobs", "length 5 != length of tokens 6"),
    ("negative token id", dict(tokens=[1, 2, 3, -4, 5, 6]), "tokens", "tokens[3] = -4"),
    ("bad span kind", dict(spans=_spans(("prompt", 0, 2), ("action", 2, 5), ("tool", 5, 6))),
     "spans[2].kind", "'tool' is not one of"),
    ("gap between spans", dict(spans=_spans(("prompt", 0, 2), ("action", 3, 5), ("observation", 5, 6)),
                               logprobs=[NAN, NAN, NAN, -0.2, -0.3, NAN]),
     "spans[1].start", "gap: starts at 3, previous span ended at 2"),
    ("overlapping spans", dict(spans=_spans(("prompt", 0, 3), ("action", 2, 5), ("observation", 5, 6))),
     "spans[1].start", "overlap: starts at 2, previous span ended at 3"),
    ("empty span", dict(spans=_spans(("prompt", 0, 2), ("action", 2, 5), ("observation", 5, 5),
                                     ("observation", 5, 6))),
     "spans[2].end", "no empty spans"),
    ("span past the end", dict(spans=_spans(("prompt", 0, 2), ("action", 2, 5), ("observation", 5, 9))),
     "spans[2].end", "past the last token"),
    ("spans stop short", dict(spans=_spans(("prompt", 0, 2), ("action", 2, 5))), "spans",
     "cover tokens [0, 5) but there are 6 tokens"),
    ("tokens without spans", dict(spans=[], logprobs=[NAN] * 6, logprob_source="none"), "spans", "no spans"),
    ("action without policy version", dict(spans=[dict(kind="prompt", start=0, end=2),
                                                  dict(kind="action", start=2, end=5),
                                                  dict(kind="observation", start=5, end=6)]),
     "spans[1].policy_version", "without a policy version"),
    ("prompt with policy version", dict(spans=[dict(kind="prompt", start=0, end=2, policy_version=1),
                                               dict(kind="action", start=2, end=5, policy_version=3),
                                               dict(kind="observation", start=5, end=6)]),
     "spans[0].policy_version", "only action spans carry a policy version"),
    ("negative policy version", dict(spans=_spans(("prompt", 0, 2), ("action", 2, 5), ("observation", 5, 6))
                                     [:1] + [dict(kind="action", start=2, end=5, policy_version=-1),
                                             dict(kind="observation", start=5, end=6)]),
     "spans[1].policy_version", "must be >= 0"),
    ("negative temperature", dict(spans=_spans(("prompt", 0, 2), ("action", 2, 5), ("observation", 5, 6),
                                               temperature=-0.5)),
     "spans[1].temperature", "finite and >= 0"),
    ("top_p zero", dict(spans=_spans(("prompt", 0, 2), ("action", 2, 5), ("observation", 5, 6), top_p=0.0)),
     "spans[1].top_p", "(0, 1]"),
    ("top_p above one", dict(spans=_spans(("prompt", 0, 2), ("action", 2, 5), ("observation", 5, 6), top_p=1.5)),
     "spans[1].top_p", "(0, 1]"),
    ("logprob on a prompt token", dict(logprobs=[-0.5, NAN, -0.1, -0.2, -0.3, NAN]), "action_logprobs",
     "must be null outside action spans (1 non-null, first at token 0)"),
    ("logprob on an observation token", dict(logprobs=[NAN, NAN, -0.1, -0.2, -0.3, -1.0]), "action_logprobs",
     "first at token 5"),
    ("engine trajectory with no action log-prob at all", dict(logprobs=[NAN] * 6), "action_logprobs",
     "logprob_source is engine but no action token has a log-prob"),
    ("engine action token with -inf logprob", dict(logprobs=[NAN, NAN, -0.1, -0.2, -math.inf, NAN]), "action_logprobs",
     "1 action token(s) have an infinite log-prob (first at token 4: -inf)"),
    # vLLM's -9999.0 stand-in for -inf (and any value no engine can have sampled) given through the SDK
    ("engine stand-in -9999 logprob", dict(logprobs=[NAN, NAN, -0.1, -9999.0, -0.3, NAN]), "action_logprobs",
     "1 action token(s) have a log-prob below -1000 nats (first at token 3: -9999.0)"),
    ("logprob -1e30", dict(logprobs=[NAN, NAN, -1e30, -0.2, -0.3, NAN]), "action_logprobs", "(first at token 2: -1.00000001"),
    ("positive logprob", dict(logprobs=[NAN, NAN, -0.1, 0.2, -0.3, NAN]), "action_logprobs",
     "must be <= 0 (1 positive, first at token 3"),
    ("logprob_source none with logprobs", dict(logprob_source="none"), "action_logprobs",
     "logprob_source is 'none' but some log-probs are set"),
]


@pytest.mark.parametrize(("update", "field", "fragment"), [c[1:] for c in BROKEN], ids=[c[0] for c in BROKEN])
def test_each_rule_names_trajectory_and_field(update: dict[str, Any], field: str, fragment: str) -> None:
    traj = Trajectory(**_base(**update))
    with pytest.raises(TrajectoryValidationError) as ei:
        validate_trajectory(traj)
    err = ei.value
    expected_id = update.get("trajectory_id", "rule-test") or "<missing>"
    assert err.trajectory_id == expected_id
    assert repr(expected_id) in str(err)
    named = [v for v in err.violations if v.field == field]
    assert named, f"no violation names {field!r}: {err.violations}"
    assert any(fragment in v.message for v in named), named
    assert f"{field}: " in str(err)


def test_all_violations_reported_together() -> None:
    # Five independent problems in one record: bad status, NaN reward, negative token id,
    # a gap between spans, a positive action log-prob.
    traj = Trajectory(**_base(
        status="???", reward=NAN, tokens=[1, -2, 3, 4, 5, 6],
        spans=_spans(("prompt", 0, 2), ("action", 3, 5), ("observation", 5, 6)),
        logprobs=[NAN, NAN, NAN, 0.5, -0.3, NAN],
    ))
    with pytest.raises(TrajectoryValidationError) as ei:
        validate_trajectory(traj)
    fields = [v.field for v in ei.value.violations]
    assert {"status", "reward", "tokens", "spans[1].start", "action_logprobs"} <= set(fields)
    assert f"({len(fields)} problems)" in str(ei.value)
    assert find_violations(traj) == ei.value.violations


def test_writer_rejects_invalid_and_buffers_nothing(tmp_store: str) -> None:
    bad = Trajectory(**_base(trajectory_id="bad-one", reward=math.inf))
    good = Trajectory(**_base(trajectory_id="good-one"))
    with StoreWriter(tmp_store, flush_seconds=None) as w:
        with pytest.raises(TrajectoryValidationError, match="bad-one"):
            w.write(bad)
        w.write(good)
    assert read_trajectories(tmp_store).column("trajectory_id").to_pylist() == ["good-one"]


def test_no_action_tokens_is_storable_but_not_trainable(tmp_store: str) -> None:
    traj = Trajectory(**_base(trajectory_id="obs-only", logprob_source="none", logprobs=[NAN] * 6,
                              spans=_spans(("prompt", 0, 2), ("observation", 2, 6))))
    assert find_violations(traj) == []
    with StoreWriter(tmp_store, flush_seconds=None) as w:
        w.write(traj)
    row = read_trajectories(tmp_store).to_pylist()[0]
    assert row["trainable"] is False
    assert row["not_trainable_reason"] == "no action tokens"
    assert row["num_action_tokens"] == 0 and row["num_actions"] == 0
    assert row["min_policy_version"] is None and row["max_policy_version"] is None


def test_engine_action_token_without_logprob_is_accepted_and_counted(tmp_store: str) -> None:
    # Schema v2: a token the engine gave no log-prob for is stored as NaN and counted, never
    # refused (ingest issue, item 5) and never given a made-up value.
    traj = Trajectory(**_base(logprobs=[NAN, NAN, -0.1, NAN, -0.3, NAN]))
    assert validate_trajectory(traj) is traj
    write_trajectories(tmp_store, [traj])
    row = read_trajectories(tmp_store).to_pylist()[0]
    # action tokens 2..4: values [-0.1, NaN, -0.3] -> one missing
    assert row["num_missing_logprobs"] == 1
    assert [s["num_missing_logprobs"] for s in row["spans"]] == [None, 1, None]
    assert row["action_logprobs"][0] == pytest.approx(-0.1) and math.isnan(row["action_logprobs"][1])


def test_action_without_logprobs_needs_no_version_when_source_is_none() -> None:
    # With logprob_source "none" (e.g. an engine that returned no log-probs) the version is optional.
    traj = Trajectory(**_base(logprob_source="none", logprobs=[NAN] * 6,
                              spans=[dict(kind="prompt", start=0, end=2), dict(kind="action", start=2, end=5),
                                     dict(kind="observation", start=5, end=6)]))
    assert find_violations(traj) == []


def test_token_ids_must_fit_int32() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="int32"):
        Trajectory(**_base(tokens=[1, 2, 3, 4, 5, 2**31]))
    with pytest.raises(ValidationError, match="integers"):
        Trajectory(**_base(tokens=np.array([1.0, 2, 3, 4, 5, 6])))


def test_token_ids_below_int32_do_not_wrap() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match=r"int32 \(tokens\[5\]"):
        Trajectory(**_base(tokens=[1, 2, 3, 4, 5, -(2**40)]))


_circular: dict[str, Any] = {}
_circular["self"] = _circular

# Values the models accept but Arrow cannot store: each used to fail only at flush time,
# which left the bad record in the writer's buffer and made every later flush fail too.
UNSTORABLE: list[tuple[str, dict[str, Any], str, str]] = [
    ("policy version beyond int64", dict(spans=_spans(("prompt", 0, 2), ("observation", 5, 6))[:1] + [
        dict(kind="action", start=2, end=5, policy_version=2**70), dict(kind="observation", start=5, end=6)]),
     "spans[1].policy_version", "does not fit in int64"),
    ("max_tokens beyond int64", dict(spans=_spans(("prompt", 0, 2), ("action", 2, 5), ("observation", 5, 6),
                                                  max_tokens=2**64)),
     "spans[1].max_tokens", "does not fit in int64"),
    ("lone surrogate in model", dict(model="\ud800"), "model", "UTF-8"),
    ("lone surrogate in call_id", dict(spans=_spans(("prompt", 0, 2), ("action", 2, 5), ("observation", 5, 6),
                                                    call_id="\udcff")),
     "spans[1].call_id", "UTF-8"),
    ("circular metadata", dict(metadata=_circular), "metadata", "not JSON-serialisable"),
]


@pytest.mark.parametrize(("update", "field", "fragment"), [c[1:] for c in UNSTORABLE], ids=[c[0] for c in UNSTORABLE])
def test_unstorable_values_are_refused_at_write_and_do_not_block_the_writer(
        tmp_store: str, update: dict[str, Any], field: str, fragment: str) -> None:
    bad = Trajectory(**_base(trajectory_id="bad-one", **update))
    assert any(v.field == field and fragment in v.message for v in find_violations(bad)), find_violations(bad)
    with StoreWriter(tmp_store, flush_rows=2, flush_seconds=None) as w:
        w.write(Trajectory(**_base(trajectory_id="good-1")))
        with pytest.raises(TrajectoryValidationError, match="bad-one"):
            w.write(bad)
        w.write(Trajectory(**_base(trajectory_id="good-2")))
    assert read_trajectories(tmp_store).column("trajectory_id").to_pylist() == ["good-1", "good-2"]


def _fields(traj: Trajectory) -> dict[str, str]:
    return {v.field: v.message for v in find_violations(traj)}


# adversarial input: a hole found attacking the store and the SDK (failed before its fix)
def test_base_record_of_the_adversarial_cases_is_valid() -> None:
    assert find_violations(Trajectory(**valid_record())) == []


# adversarial input: a hole found attacking the store and the SDK (failed before its fix)
@pytest.mark.parametrize("tid", ["abc\n", "abc\r", "a\nb", "abc\n\n"])
def test_trajectory_id_with_a_trailing_newline_is_refused(tid: str) -> None:
    # `$` matched before a trailing newline, so "abc\n" passed the path-safety rule.
    (v,) = check_trajectory_id(tid)
    assert v.field == "trajectory_id" and "not safe in a path" in v.message


# adversarial input: a hole found attacking the store and the SDK (failed before its fix)
@pytest.mark.parametrize("meta", [{"x": NAN}, {"deep": [1.0, {"y": math.inf}]}, {"z": -math.inf}])
def test_nan_or_infinity_in_metadata_is_refused(meta: dict[str, Any], tmp_store: str) -> None:
    # json.dumps wrote NaN / Infinity, which is not JSON: DuckDB's json functions and other
    # readers reject it later.
    t = Trajectory(**valid_record(metadata=meta))
    assert "metadata" in _fields(t) and "not standard JSON" in _fields(t)["metadata"]
    with StoreWriter(tmp_store, flush_seconds=None) as w:
        with pytest.raises(TrajectoryValidationError, match="metadata"):
            w.write(t)
    assert read_trajectories(tmp_store).num_rows == 0


# adversarial input: a hole found attacking the store and the SDK (failed before its fix)
@pytest.mark.parametrize(("field", "value", "fragment"), [
    ("min_p", NAN, "min_p: must be finite and in [0, 1]"),
    ("min_p", 1.5, "min_p: must be finite and in [0, 1]"),
    ("top_k", -5, "top_k: must be -1 or 0 (disabled) or >= 1"),
    ("max_tokens", -3, "max_tokens: must be >= 1"),
    ("max_tokens", 0, "max_tokens: must be >= 1"),
    ("top_p", NAN, "top_p: must be in (0, 1]"),  # already refused before; kept beside min_p
    ("temperature", NAN, "temperature: must be finite and >= 0"),
    ("sampling_params", "{not json", "sampling_params: is not valid JSON"),
    ("sampling_params", "[1, 2]", "sampling_params: must be a JSON object"),
    ("sampling_params", '{"temperature": NaN}', "sampling_params: is not valid JSON"),
])
def test_bad_sampling_parameters_are_refused(field: str, value: Any, fragment: str) -> None:
    spans = valid_record()["spans"]
    spans[1] = {**spans[1], field: value}
    fields = _fields(Trajectory(**valid_record(spans=spans)))
    key = f"spans[1].{field}"
    assert key in fields, fields
    assert fragment.split(": ", 1)[-1] in fields[key]


# adversarial input: a hole found attacking the store and the SDK (failed before its fix)
@pytest.mark.parametrize("ok", [{"top_k": -1}, {"top_k": 0}, {"top_k": 40}, {"min_p": 0.0}, {"max_tokens": 1},
                                {"sampling_params": '{"seed": 7}'}])
def test_usual_sampling_parameters_are_accepted(ok: dict[str, Any]) -> None:
    spans = valid_record()["spans"]
    spans[1] = {**spans[1], **ok}
    assert find_violations(Trajectory(**valid_record(spans=spans))) == []


# adversarial input: a hole found attacking the store and the SDK (failed before its fix)
@pytest.mark.parametrize("raw", ["not json", "{'a': 1}", "NaN", "1 2"])
def test_reward_raw_must_be_json(raw: str) -> None:
    fields = _fields(Trajectory(**valid_record(reward_raw=raw)))
    assert "reward_raw" in fields and "not valid JSON" in fields["reward_raw"]


# adversarial input: a hole found attacking the store and the SDK (failed before its fix)
def test_reward_raw_json_accepted() -> None:
    for raw in ['true', '"positive"', '{"passed": 3}', '0.5', 'null']:
        assert find_violations(Trajectory(**valid_record(reward_raw=raw))) == []


# -- lineage (schema v3) -----------------------------------------------------------------------

LINEAGE_BROKEN: list[tuple[str, dict[str, Any], str, str]] = [
    ("link kind without a parent", dict(link_kind="fork"), "link_kind", "no parent_trajectory_id"),
    ("fork point without a parent", dict(fork_point=2), "fork_point", "no parent_trajectory_id"),
    ("parent without a link kind", dict(parent_trajectory_id="p", fork_point=2), "link_kind", "is null but"),
    ("parent without a fork point", dict(parent_trajectory_id="p", link_kind="fork"), "fork_point", "is null but"),
    ("unknown link kind", dict(parent_trajectory_id="p", fork_point=2, link_kind="retry"), "link_kind",
     "'retry' is not one of ['subagent', 'context_rewrite', 'fork', 'continuation']"),
    ("negative fork point", dict(parent_trajectory_id="p", fork_point=-1, link_kind="fork"), "fork_point",
     "must be >= 0, got -1"),
    ("fork point past its own end", dict(parent_trajectory_id="p", fork_point=7, link_kind="fork"), "fork_point",
     "7 is past the trajectory's own end (6 tokens)"),
    ("own parent", dict(parent_trajectory_id="rule-test", fork_point=0, link_kind="fork"), "parent_trajectory_id",
     "own id"),
    ("unsafe parent id", dict(parent_trajectory_id="../x", fork_point=0, link_kind="fork"), "parent_trajectory_id",
     "not safe in a path"),
    ("empty episode id", dict(episode_id=""), "episode_id", "non-empty"),
]


@pytest.mark.parametrize("case, update, field, fragment", LINEAGE_BROKEN, ids=[c[0] for c in LINEAGE_BROKEN])
def test_each_lineage_rule_is_named(case: str, update: dict[str, Any], field: str, fragment: str) -> None:
    with pytest.raises(TrajectoryValidationError) as e:
        validate_trajectory(Trajectory(**_base(**update)))
    assert e.value.trajectory_id == "rule-test"
    assert any(v.field == field and fragment in v.message for v in e.value.violations), e.value.violations


def test_valid_children_of_every_link_kind() -> None:
    for kind in ("subagent", "context_rewrite", "fork", "continuation"):
        for fork in (0, 6):  # nothing shared / every own token shared
            validate_trajectory(Trajectory(**_base(parent_trajectory_id="p", fork_point=fork, link_kind=kind,
                                                   episode_id="ep")))


def _child(tid: str, parent: str, fork: int) -> Trajectory:
    return Trajectory(**_base(trajectory_id=tid, parent_trajectory_id=parent, fork_point=fork, link_kind="fork"))


def test_writer_refuses_a_child_whose_parent_is_nowhere(tmp_store: str) -> None:
    with pytest.raises(TrajectoryValidationError) as e:
        write_trajectories(tmp_store, [Trajectory(**_base(trajectory_id="root")), _child("kid", "ghost", 2)])
    (v,) = e.value.violations
    assert (e.value.trajectory_id, v.field) == ("kid", "parent_trajectory_id")
    assert "'ghost' is neither in the same write nor in the store" in v.message


def test_writer_takes_a_parent_later_in_the_same_write_or_already_stored(tmp_store: str) -> None:
    # child first, its parent after it in the same call; then a grandchild whose parent is only in the store
    write_trajectories(tmp_store, [_child("kid", "root", 6), Trajectory(**_base(trajectory_id="root"))])
    write_trajectories(tmp_store, [_child("grandkid", "kid", 4)])
    t = read_trajectories(tmp_store, columns=["trajectory_id", "parent_trajectory_id", "fork_point", "link_kind",
                                             "episode_id"])
    assert t.to_pylist() == [
        {"trajectory_id": "kid", "parent_trajectory_id": "root", "fork_point": 6, "link_kind": "fork",
         "episode_id": "kid"},
        {"trajectory_id": "root", "parent_trajectory_id": None, "fork_point": None, "link_kind": None,
         "episode_id": "root"},
        {"trajectory_id": "grandkid", "parent_trajectory_id": "kid", "fork_point": 4, "link_kind": "fork",
         "episode_id": "grandkid"}]


def test_writer_refuses_a_fork_point_past_the_parents_end(tmp_store: str) -> None:
    short = Trajectory(**_base(trajectory_id="short", tokens=[1, 2, 3], logprobs=[NAN, -0.1, NAN],
                               spans=_spans(("prompt", 0, 1), ("action", 1, 2), ("observation", 2, 3))))
    write_trajectories(tmp_store, [short])
    with StoreWriter(tmp_store, flush_seconds=None) as w:
        with pytest.raises(TrajectoryValidationError) as e:
            w.write(_child("long", "short", 5))  # 5 of its own 6 tokens, but the parent has 3
        (v,) = e.value.violations
        assert (e.value.trajectory_id, v.field) == ("long", "fork_point")
        assert v.message == "5 is past the end of parent 'short' (3 tokens)"
        w.write(_child("ok", "short", 3))
    assert read_trajectories(tmp_store, columns=["trajectory_id"]).column(0).to_pylist() == ["short", "ok"]
