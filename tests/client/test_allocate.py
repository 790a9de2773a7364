from hypothesis import given
from hypothesis import strategies as st

from lakemq.client.allocate import STRATEGIES, allocate_averagely, allocate_averagely_by_circle
from lakemq.common.message_queue import MessageQueue


def queues(n: int) -> list[MessageQueue]:
    return sorted(MessageQueue("T", f"b{i % 2}", i // 2) for i in range(n))


def table(strategy, n_mq: int, n_cid: int) -> list[list[int]]:
    mqs = queues(n_mq)
    cids = [f"c{i}" for i in range(n_cid)]
    return [[mqs.index(mq) for mq in strategy(cid, mqs, cids)] for cid in cids]


def test_averagely_pages_like_rocketmq() -> None:
    assert table(allocate_averagely, 10, 3) == [[0, 1, 2, 3], [4, 5, 6], [7, 8, 9]]
    assert table(allocate_averagely, 8, 3) == [[0, 1, 2], [3, 4, 5], [6, 7]]
    assert table(allocate_averagely, 2, 3) == [[0], [1], []]
    assert table(allocate_averagely, 4, 4) == [[0], [1], [2], [3]]
    assert table(allocate_averagely, 4, 1) == [[0, 1, 2, 3]]


def test_by_circle_deals_like_cards() -> None:
    assert table(allocate_averagely_by_circle, 10, 3) == [[0, 3, 6, 9], [1, 4, 7], [2, 5, 8]]
    assert table(allocate_averagely_by_circle, 2, 3) == [[0], [1], []]


def test_unknown_consumer_gets_nothing() -> None:
    assert allocate_averagely("ghost", queues(4), ["c0", "c1"]) == []
    assert allocate_averagely_by_circle("ghost", queues(4), ["c0"]) == []
    assert allocate_averagely("c0", [], ["c0"]) == []


@given(st.integers(0, 40), st.integers(1, 12), st.sampled_from(sorted(STRATEGIES)))
def test_every_queue_exactly_once_and_balanced(n_mq: int, n_cid: int, name: str) -> None:
    result = table(STRATEGIES[name], n_mq, n_cid)
    flat = [i for part in result for i in part]
    assert sorted(flat) == list(range(n_mq))
    sizes = [len(p) for p in result]
    assert max(sizes) - min(sizes) <= 1
    if name == "AVG":
        assert flat == list(range(n_mq))  # contiguous pages in consumer order
