import json
import uuid
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from safebunny import ids

VECTORS = json.loads((Path(__file__).parents[1] / "vectors" / "message_ids.json").read_text("utf-8"))


@pytest.mark.parametrize("case", VECTORS["message_ids"], ids=lambda c: f"{c['node']}-{c['index']}")
def test_message_id_matches_committed_vectors(case):
    got = ids.message_id(case["causation_id"], case["node"], case["message_type"], case["index"])
    assert got == case["expected"]


@pytest.mark.parametrize("case", VECTORS["correlation_ids"], ids=lambda c: c["business_key"][:20])
def test_correlation_id_matches_committed_vectors(case):
    assert ids.correlation_id_for(case["business_key"]) == case["expected"]


def test_vectors_namespace_is_the_library_namespace():
    assert VECTORS["namespace"] == str(ids.NAMESPACE)


def test_message_id_is_a_version5_uuid():
    value = uuid.UUID(ids.message_id("c", "n", "t", 0))
    assert value.version == 5


def test_separator_characters_do_not_collide():
    assert ids.message_id("a|b", "c", "d") != ids.message_id("a", "b|c", "d")
    assert ids.encode_name("t", "a|b", "c") != ids.encode_name("t", "a", "b|c")


@pytest.mark.parametrize(
    "args, word",
    [
        (("", "n", "t", 0), "causation_id"),
        (("c", "", "t", 0), "node"),
        (("c", "n", None, 0), "message_type"),
        (("c", "n", "t", -1), "index"),
        (("c", "n", "t", True), "index"),
        (("c", "n", "t", "0"), "index"),
    ],
)
def test_bad_arguments_name_the_argument(args, word):
    with pytest.raises(ValueError, match=word):
        ids.message_id(*args)


def test_saga_start_is_deterministic_and_uses_the_correlation_id():
    corr = ids.correlation_id_for("order-42")
    assert ids.saga_start(corr, "billing", "OrderPlaced") == ids.saga_start(corr, "billing", "OrderPlaced")
    assert ids.saga_start(corr, "billing", "OrderPlaced")[1] == ids.message_id(corr, "billing", "OrderPlaced", 0)


def test_new_correlation_ids_are_fresh():
    assert len({ids.new_correlation_id() for _ in range(1000)}) == 1000


text = st.text(min_size=1, max_size=40)


@given(text, text, text, st.integers(min_value=0, max_value=10_000))
def test_same_inputs_same_id(c, n, t, i):
    assert ids.message_id(c, n, t, i) == ids.message_id(c, n, t, i)


@settings(max_examples=300)
@given(st.lists(st.tuples(text, text, text, st.integers(0, 50)), min_size=2, max_size=200, unique=True))
def test_distinct_slots_never_collide(slots):
    assert len({ids.message_id(*s) for s in slots}) == len(slots)


def test_large_sample_has_no_collisions():
    seen = {ids.message_id(f"cause-{c}", f"node-{c % 7}", "T", i) for c in range(20_000) for i in range(5)}
    assert len(seen) == 100_000



def test_message_ids_in_bulk_match_the_committed_vectors():
    for case in VECTORS["message_ids"]:
        got = ids.message_ids([(case["causation_id"], case["index"])], case["node"], case["message_type"])
        assert got == [case["expected"]], case


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.text(min_size=1), st.integers(0, 10_000)), max_size=8),
       st.text(min_size=1), st.text(min_size=1))
def test_message_ids_in_bulk_are_message_id_of_each(outputs, node, message_type):
    assert ids.message_ids(outputs, node, message_type) == [
        ids.message_id(cause, node, message_type, index) for cause, index in outputs]


def test_message_ids_in_bulk_check_their_fields_as_message_id_does():
    with pytest.raises(ValueError, match="'causation_id' must be a non-empty str"):
        ids.message_ids([("", 0)], "billing", "T")
    with pytest.raises(ValueError, match="'index' must be an int >= 0"):
        ids.message_ids([("m1", -1)], "billing", "T")
    with pytest.raises(ValueError, match="'node' must be a non-empty str"):
        ids.message_ids([("m1", 0)], "", "T")
    with pytest.raises(ValueError, match="'message_type' must be a non-empty str"):
        ids.message_ids([], "billing", "")  # checked on empty input too: a bad node or type fails at once
