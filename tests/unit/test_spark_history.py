"""The driver's cache of a Delta table's history: after one whole read, only the new commits are asked for, and
the answer is the whole history; a table replaced under its name is read whole again."""

from __future__ import annotations

from safebunny.delta.spark_history import HistoryCache


class FakeTable:
    """``DESCRIBE HISTORY [LIMIT n]`` of a table whose commits are listed oldest first."""

    def __init__(self, commits: int, stamp: str = "t") -> None:
        self.rows = [(v, f"{stamp}{v}", f"tag {v}", "WRITE") for v in range(commits)]
        self.limits: list[int | None] = []

    def commit(self, n: int = 1, stamp: str = "t") -> None:
        start = len(self.rows)
        self.rows += [(v, f"{stamp}{v}", f"tag {v}", "WRITE") for v in range(start, start + n)]

    def describe(self, limit: int | None) -> list:
        self.limits.append(limit)
        newest_first = list(reversed(self.rows))
        return newest_first if limit is None else newest_first[:limit]


def read(cache: HistoryCache, table: FakeTable) -> list:
    cache._catch_up(table.describe)
    return [cache._entries[v] for v in sorted(cache._entries, reverse=True)]


def test_after_one_whole_read_only_the_new_commits_are_read() -> None:
    table, cache = FakeTable(30), HistoryCache("t")
    assert read(cache, table) == list(reversed(table.rows))
    table.commit(2)
    assert read(cache, table) == list(reversed(table.rows))
    assert table.limits == [None, 8]
    assert cache.whole_reads == 1


def test_many_new_commits_widen_the_limit_until_a_known_one() -> None:
    table, cache = FakeTable(3), HistoryCache("t")
    read(cache, table)
    table.commit(20)
    assert read(cache, table) == list(reversed(table.rows))
    assert table.limits == [None, 8, 64]


def test_nothing_new_reads_the_newest_few_only() -> None:
    table, cache = FakeTable(5), HistoryCache("t")
    read(cache, table)
    assert read(cache, table) == list(reversed(table.rows))
    assert table.limits == [None, 8]


def test_a_table_replaced_under_its_name_is_read_whole_again() -> None:
    table, cache = FakeTable(10), HistoryCache("t")
    read(cache, table)
    shorter = FakeTable(4, stamp="new")  # dropped and created again: fewer commits
    assert read(cache, shorter) == list(reversed(shorter.rows))
    longer = FakeTable(12, stamp="other")  # created again with more commits: a known version reads differently
    assert read(cache, longer) == list(reversed(longer.rows))
    assert cache.whole_reads == 3


def test_a_new_empty_history_is_empty() -> None:
    table, cache = FakeTable(0), HistoryCache("t")
    assert read(cache, table) == []
    table.commit(1)
    assert read(cache, table) == list(reversed(table.rows))


def test_a_gap_after_the_known_commits_is_read_whole_again() -> None:
    """Log cleanup removed commits this process never read: what is left is taken as a new process takes it."""
    table, cache = FakeTable(3), HistoryCache("t")
    read(cache, table)
    table.commit(20)
    table.rows = table.rows[15:]  # versions 0-14 cleaned up: 3-14 were never read
    assert read(cache, table) == list(reversed(table.rows))
    assert cache.whole_reads == 2
