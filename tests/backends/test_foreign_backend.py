# SPDX-License-Identifier: Apache-2.0
"""What the shortfin, vLLM and SGLang backends share (kvviz.backends.foreign_backend), without
any engine: engine calls, kvcore's misuse checks, the factories' config checks, and the rows
the engine backends keep by id."""

import random
from types import SimpleNamespace

import pytest

from kvcore import InvalidOperation, KVCacheError
from kvviz.backends import BackendError, Call, UnknownAllocation
from kvviz.backends.foreign_backend import (OP_EVENTS, EngineCalls, RowsById, acquisition, check_config, extension,
                                            op_events, publish_tokens)


class ToyError(KVCacheError):
    pass


class Refused(Exception):
    pass


class ToyBackend(EngineCalls):
    engine, version, error, passes = "Toy", "1.0", ToyError, (Refused,)

    def __init__(self):
        self._handles = {"b": SimpleNamespace(id=1, name="b"), "a": SimpleNamespace(id=0, name="a")}
        self._events = ["e"]
        self.heard: list = []
        self._watch = self.heard.append


def crash():
    raise ValueError("boom")


def refuse():
    raise Refused()


def test_a_crash_in_the_engine_becomes_the_backends_error_naming_engine_and_version():
    with pytest.raises(ToyError, match=r"^acquire a: Toy 1.0's crash raised ValueError: boom$"):
        ToyBackend()._call("acquire a", crash)


def test_what_the_engine_raises_as_a_refusal_passes_through_and_the_watcher_hears_of_it():
    backend = ToyBackend()
    with pytest.raises(Refused):
        backend._call("acquire a", refuse)
    assert backend.heard == [Call("refuse", "acquire a: it raised Refused")]


def test_a_fresh_backend_has_no_allocations_no_stats_no_events_and_no_watcher_until_watched():
    backend = ToyBackend()
    backend._start()
    assert (backend.live_names(), backend.take_events(), backend._watch) == ([], (), None)
    assert set(backend._stats.values()) == {0}
    backend.watch(print)
    assert backend._watch is print


def test_allocations_are_named_in_creation_order_and_an_unknown_name_is_refused():
    backend = ToyBackend()
    assert backend.live_names() == ["a", "b"]
    with pytest.raises(UnknownAllocation):
        backend.handle("c")
    assert backend.take_events() == ("e",) and backend.take_events() == ()


def test_each_op_kind_runs_the_backends_method_of_that_name_and_others_are_refused():
    backend = ToyBackend()
    backend._acquire = lambda op: ("acquired", op.name)
    backend._release = lambda name: ("released", name)
    assert backend._op(SimpleNamespace(kind="acquire", name="a"))() == ("acquired", "a")
    assert backend._op(SimpleNamespace(kind="release", name="a"))() == ("released", "a")
    with pytest.raises(InvalidOperation, match="unknown op 'evict'"):
        backend._op(SimpleNamespace(kind="evict", name="a"))


def test_an_acquire_of_a_live_name_or_of_bad_extra_slots_is_refused_with_kvcores_messages():
    with pytest.raises(InvalidOperation, match="already live"):
        acquisition(SimpleNamespace(name="a", tokens=(1,), extra=0), {"a": None})
    with pytest.raises(InvalidOperation):
        acquisition(SimpleNamespace(name="a", tokens=(1,), extra=True), {})
    assert acquisition(SimpleNamespace(name="a", tokens=None, extra=0), {}) == ()


def test_the_events_two_states_show_are_the_ones_op_events_reports():
    class Snap:
        clock = 3

        def __init__(self, *allocations):
            self.allocations = {a.name: a for a in allocations}

        def allocation_named(self, name):
            return self.allocations.get(name)

    a = SimpleNamespace(id=7, name="a", pages=(0, 1))
    events = op_events("acquire", "a", Snap(), Snap(a)) + op_events("release", "a", Snap(a), Snap())
    assert {type(e).__name__ for e in events} == OP_EVENTS
    assert [e.pages for e in events if hasattr(e, "pages")] == [(0, 1)]


def test_publish_tokens_that_disagree_or_do_not_fit_are_refused_with_kvcores_messages():
    with pytest.raises(InvalidOperation, match="at position 1"):
        publish_tokens("a", (1, 2), (1, 3), 1, 4)
    with pytest.raises(InvalidOperation, match="5 tokens do not fit in its 1 pages"):
        publish_tokens("a", (1, 2), (1, 2, 3, 4, 5), 1, 4)
    assert publish_tokens("a", (1, 2), (1, 2, 3), 1, 4) == (1, 2, 3)


def test_an_extension_must_start_with_the_allocations_tokens():
    op = SimpleNamespace(name="a", tokens=(2, 3), append=False, extra=0)
    with pytest.raises(InvalidOperation, match="must start with the allocation's 1 tokens"):
        extension((1,), op)
    assert extension((1,), SimpleNamespace(name="a", tokens=(2,), append=True, extra=0)) == (1, 2)


@pytest.mark.parametrize("config, snapshot, message", [
    (dict(kind="trie"), object(), "the toy backend cannot restore a snapshot; replay from frame 0"),
    (dict(kind="hash"), None, "no 'hash' here"),
    (dict(policy="fifo"), None, "no 'fifo' here"),
    (dict(pages=0), None, "the toy backend needs pages to be an integer >= 1, got 0"),
    (dict(tokens_per_page=True), None, "the toy backend needs tokens_per_page to be an integer >= 1, got True"),
])
def test_a_config_the_engine_cannot_run_is_refused_in_one_line(config, snapshot, message):
    config = SimpleNamespace(**{"kind": "trie", "policy": "lru", "pages": 4, "tokens_per_page": 2, **config})
    with pytest.raises(BackendError) as info:
        check_config("toy", config, snapshot, kind="trie", wrong_kind="no {kind!r} here",
                     wrong_policy="no {policy!r} here")
    assert str(info.value) == message


def test_rows_kept_by_id_stay_sorted_through_puts_replacements_and_drops():
    rng = random.Random(7)
    rows, model = RowsById(SimpleNamespace(id=i, v=0) for i in (1, 4, 9)), {1: 0, 4: 0, 9: 0}
    for step in range(300):
        row_id = rng.randint(0, 30)
        if row_id in model and rng.random() < 0.5:
            rows.drop(row_id)
            del model[row_id]
        else:
            rows.put(SimpleNamespace(id=row_id, v=step))
            model[row_id] = step
        assert [(r.id, r.v) for r in rows.rows] == sorted(model.items())
        probe = rng.randint(0, 30)
        assert (rows.get(probe).v if probe in model else rows.get(probe)) == model.get(probe)
    with pytest.raises(KeyError):
        rows.drop(31)
