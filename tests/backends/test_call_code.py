# SPDX-License-Identifier: Apache-2.0
"""call_code: the pseudo-code every foreign backend builds from its text and call map."""

from kvviz.backends.code import block, call_code

_TEXT = block("""
def acquire(name, tokens):      @acquire
    cache.lookup(tokens)        @lookup
    cache.allocate(rest)        @allocate
def release(name):              @release
    cache.free(name)            @free
""")
_CALLS = {"acquire": (("lookup", "lookup"), ("allocate", "allocate")), "release": (("free", "free"),)}


def test_each_call_lights_the_line_that_makes_it():
    code = call_code("toy", "a toy", "nowhere", _TEXT, _CALLS)
    assert code.lines("acquire", "call", {"call": "allocate"}) == ("toy", (3,))
    assert code.lines("release", "call", {"call": "free"}) == ("toy", (5,))


def test_a_call_the_context_does_not_name_is_the_ops_first():
    code = call_code("toy", "a toy", "nowhere", _TEXT, _CALLS)
    assert code.lines("acquire", "call") == ("toy", (2,))


def test_start_and_refused_light_the_ops_def_line_and_every_op_runs_the_one_algorithm():
    code = call_code("toy", "a toy", "nowhere", _TEXT, _CALLS)
    assert code.lines("release", "start") == code.lines("release", "refused") == ("toy", (4,))
    assert dict(code.entry) == {"acquire": "toy", "release": "toy"}
    assert dict(code.calls) == _CALLS
