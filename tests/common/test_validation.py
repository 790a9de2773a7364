from __future__ import annotations

import pytest

from lakemq.common.validation import check_group, check_topic, is_valid_name
from lakemq.errors import InvalidNameError


@pytest.mark.parametrize("name", ["TopicTest", "%RETRY%group-1", "a|b", "x" * 127, "SCHEDULE_TOPIC_XXXX"])
def test_valid_topics(name: str) -> None:
    assert check_topic(name) == name


@pytest.mark.parametrize("name", ["", " ", "..", "../etc", "a/b", "a\\b", "a.b", "x" * 128, "tab\t", "é", "a\x00b"])
def test_invalid_topics_never_become_paths(name: str) -> None:
    with pytest.raises(InvalidNameError):
        check_topic(name)
    assert not is_valid_name(name)


def test_group_allows_255() -> None:
    assert check_group("g" * 255)
    with pytest.raises(InvalidNameError, match="maximum is 255"):
        check_group("g" * 256)
