from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest

from shared.cron import parse


def at(year: int, month: int, day: int, *hms: int) -> datetime:
    hour, minute, second = (*hms, 0, 0, 0)[:3]
    return datetime(year, month, day, hour, minute, second, tzinfo=UTC)


def test_every_five_minutes_fires_on_the_boundary_after_now() -> None:
    s = parse("0 */5 * * * *")
    assert s.next_after(at(2026, 1, 1, 0, 0, 0)) == at(2026, 1, 1, 0, 5, 0)
    assert s.next_after(at(2026, 1, 1, 0, 4, 59)) == at(2026, 1, 1, 0, 5, 0)


def test_next_after_is_strictly_after() -> None:
    s = parse("30 * * * * *")
    assert s.next_after(at(2026, 1, 1, 0, 0, 30)) == at(2026, 1, 1, 0, 1, 30)


def test_lists_ranges_and_steps() -> None:
    s = parse("0 0 8-18/5,23 * * *")
    got = [d.hour for d in s.between(at(2026, 1, 1), at(2026, 1, 1, 23, 59))]
    assert got == [8, 13, 18, 23]


def test_start_slash_step_runs_to_the_maximum() -> None:
    s = parse("0 50/5 0 * * *")
    got = [d.minute for d in s.between(at(2026, 1, 1), at(2026, 1, 1, 1))]
    assert got == [50, 55]


def test_weekday_and_month_names() -> None:
    s = parse("0 30 9 * JAN,dec Mon-Fri")
    # 2026-11-28 is a Saturday; November is not in the schedule, Dec 1 2026 is a Tuesday.
    assert s.next_after(at(2026, 11, 28)) == at(2026, 12, 1, 9, 30)


def test_day_of_month_and_day_of_week_must_both_match_as_in_ncrontab() -> None:
    s = parse("0 0 0 13 * FRI")
    assert s.next_after(at(2026, 1, 1)) == at(2026, 2, 13)  # first Friday the 13th of 2026


def test_leap_day_is_found_years_ahead() -> None:
    assert parse("0 0 0 29 2 *").next_after(at(2026, 1, 1)) == at(2028, 2, 29)


def test_between_yields_every_occurrence_in_order() -> None:
    s = parse("0 0 * * * *")
    got = list(s.between(at(2026, 1, 1), at(2026, 1, 1, 3)))
    assert got == [at(2026, 1, 1, 1), at(2026, 1, 1, 2), at(2026, 1, 1, 3)]


def test_time_zone_and_dst_gap() -> None:
    berlin = ZoneInfo("Europe/Berlin")
    s = parse("0 30 2 * * *", berlin)
    got = list(s.between(at(2026, 3, 28), at(2026, 3, 31)))
    # 02:30 does not exist in Berlin on 2026-03-29 (clocks jump from 02:00 to 03:00).
    assert [d.day for d in got] == [28, 30]
    assert got[0] == datetime(2026, 3, 28, 2, 30, tzinfo=berlin)
    assert got[0].astimezone(UTC) == at(2026, 3, 28, 1, 30)


def test_naive_input_is_read_as_utc() -> None:
    assert parse("0 0 12 * * *").next_after(datetime(2026, 1, 1)) == at(2026, 1, 1, 12)


@pytest.mark.parametrize(
    ("expr", "fragment"),
    [
        ("* * * * *", "must have 6 fields"),
        ("00:05:00", "TimeSpan"),
        ("61 * * * * *", "second: 61 is out of range"),
        ("0 0 24 * * *", "hour: 24 is out of range"),
        ("0 0 0 * FOO *", "month: 'FOO'"),
        ("0 0 0 5-1 * *", "runs backwards"),
        ("0 */0 * * * *", "step"),
        ("0 0 0 30 2 *", "never fires"),
        ("0 0 0 * * 7", "day-of-week: 7 is out of range"),
        ("0 0 0 1,,2 * *", "empty list item"),
    ],
)
def test_invalid_expressions_name_the_problem(expr: str, fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment):
        parse(expr)
