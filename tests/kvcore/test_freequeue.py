# SPDX-License-Identifier: Apache-2.0
"""The hash cache's free queue against a plain list, operation by operation."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kvcore.freequeue import FreeBlockQueue
from kvcore.snapshot import QueuedPages

operations = st.lists(st.tuples(st.sampled_from(["take", "remove", "append", "prepend", "forget"]),
                                st.integers(0, 4), st.booleans()), max_size=40)


@settings(max_examples=300, deadline=None)
@given(page_count=st.integers(0, 12), ops=operations)
def test_the_queue_behaves_like_a_list_of_flagged_pages(page_count, ops):
    queue = FreeBlockQueue(page_count)
    model: list[tuple[int, bool]] = [(p, False) for p in range(page_count)]
    out: list[int] = []  # pages handed out, to give back
    for op, n, flag in ops:
        if op == "take":
            n = min(n, len(model))
            assert queue.cached_among_first(n) == [p for p, f in model[:n] if f]
            taken = queue.popleft_n(n)
            assert taken == [p for p, _ in model[:n]]
            del model[:n]
            out += taken
        elif op == "remove" and any(f for _, f in model):  # only cached pages are matched
            flagged = [i for i, (_, f) in enumerate(model) if f]
            page, _ = model.pop(flagged[n % len(flagged)])
            queue.remove(page)
            out.append(page)
        elif op == "forget" and model:
            i = n % len(model)
            if model[i][1]:
                queue.forget_block(model[i][0])
                model[i] = (model[i][0], False)
        elif op in ("append", "prepend") and out:
            pages, out = out[:n], out[n:]
            if op == "append":
                queue.append_n(pages, flag)
                model += [(p, flag) for p in pages]
            else:
                queue.prepend_n(pages, flag)
                model[:0] = [(p, flag) for p in pages]
        assert list(queue) == [p for p, _ in model] and len(queue) == len(model)
        assert queue.evictable_count() == sum(f for _, f in model)
        assert queue.available_page_count() == len(model) - queue.evictable_count()
        cached = {p for p, f in model if f}
        assert queue.flag_errors(cached.__contains__) == []
        rebuilt = FreeBlockQueue.from_order(page_count, list(queue), cached)
        assert list(rebuilt) == list(queue) and rebuilt.evictable_count() == queue.evictable_count()
        front, untouched, back = queue.parts()
        lazy = QueuedPages(front, untouched, page_count, back)
        assert lazy == tuple(queue)
        assert list(FreeBlockQueue.from_order(page_count, lazy, cached)) == list(queue)


def test_an_explicit_order_keeps_its_untouched_run_as_a_range():
    queue = FreeBlockQueue.from_order(10, [4, 1, 6, 7, 8, 9, 2], {2})
    assert queue.parts() == ((4, 1), 6, (2,)) and list(queue) == [4, 1, 6, 7, 8, 9, 2]
    assert FreeBlockQueue.from_order(10, [9, 8], set()).parts() == ((), 9, (8,))
    assert FreeBlockQueue.from_order(10, [8, 9], {9}).parts() == ((8, 9), 10, ())  # a cached page is no run
