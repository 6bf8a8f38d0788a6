"""NCRONTAB schedules, as the Azure Functions timer trigger reads them (6 fields, seconds first).

``{second} {minute} {hour} {day} {month} {day-of-week}``; each field takes ``*``, numbers, ranges
``a-b``, lists ``a,b``, steps ``*/n``, ``a-b/n`` and ``a/n``, and month (JAN-DEC) and weekday
(SUN-SAT) names. As in NCrontab (the library the host uses), day-of-month and day-of-week must
*both* match, unlike Vixie cron's "either". Times are evaluated in the schedule's time zone (the
host uses WEBSITE_TIME_ZONE, UTC by default); wall-clock times skipped by a DST change do not fire.

Pure: no I/O, no azure imports. Domain and scheduler code reuse it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo

_MONTHS = {
    m: i + 1
    for i, m in enumerate(
        ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"]
    )
}
_DAYS = {d: i for i, d in enumerate(["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"])}

# (name, low, high, names)
_FIELDS: tuple[tuple[str, int, int, dict[str, int]], ...] = (
    ("second", 0, 59, {}),
    ("minute", 0, 59, {}),
    ("hour", 0, 23, {}),
    ("day", 1, 31, {}),
    ("month", 1, 12, _MONTHS),
    ("day-of-week", 0, 6, _DAYS),
)
# A schedule that cannot fire within this many years never fires (covers Feb 29 and every weekday).
_HORIZON_YEARS = 9


def _value(token: str, field: str, low: int, high: int, names: dict[str, int]) -> int:
    upper = token.upper()
    if upper in names:
        return names[upper]
    if not token.isdigit():
        raise ValueError(f"{field}: {token!r} is not a number" + (" or a name" if names else ""))
    n = int(token)
    if not low <= n <= high:
        raise ValueError(f"{field}: {n} is out of range {low}-{high}")
    return n


def _parse_field(text: str, field: str, low: int, high: int, names: dict[str, int]) -> frozenset[int]:
    out: set[int] = set()
    for part in text.split(","):
        if not part:
            raise ValueError(f"{field}: empty list item in {text!r}")
        base, slash, step_text = part.partition("/")
        step = 1
        if slash:
            if not step_text.isdigit() or int(step_text) == 0:
                raise ValueError(f"{field}: step {step_text!r} must be a positive integer")
            step = int(step_text)
        if base == "*":
            start, end = low, high
        elif "-" in base:
            a, _, b = base.partition("-")
            start, end = _value(a, field, low, high, names), _value(b, field, low, high, names)
            if start > end:
                raise ValueError(f"{field}: range {base!r} runs backwards")
        else:
            start = _value(base, field, low, high, names)
            # NCrontab reads "a/n" as "from a to the maximum, every n".
            end = high if slash else start
        out.update(range(start, end + 1, step))
    return frozenset(out)


@dataclass(frozen=True)
class CronSchedule:
    expression: str
    seconds: frozenset[int]
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]
    tz: tzinfo = UTC

    def _matches_day(self, d: datetime) -> bool:
        # Python: Monday=0; cron: Sunday=0.
        return d.month in self.months and d.day in self.days and (d.weekday() + 1) % 7 in self.weekdays

    def _next_wall(self, t: datetime, limit: datetime) -> datetime | None:
        """The first naive wall-clock time >= t that matches every field."""
        while t < limit:
            if t.month not in self.months:
                t = (t.replace(day=1) + timedelta(days=32)).replace(day=1, hour=0, minute=0, second=0)
                continue
            if not self._matches_day(t):
                t = (t + timedelta(days=1)).replace(hour=0, minute=0, second=0)
                continue
            if t.hour not in self.hours:
                t = (t + timedelta(hours=1)).replace(minute=0, second=0)
                continue
            if t.minute not in self.minutes:
                t = (t + timedelta(minutes=1)).replace(second=0)
                continue
            if t.second not in self.seconds:
                t += timedelta(seconds=1)
                continue
            return t
        return None

    def next_after(self, dt: datetime) -> datetime | None:
        """The first occurrence strictly after ``dt`` (aware; naive means UTC), in the schedule's zone.

        None if the schedule never fires again (e.g. ``0 0 0 30 2 *``).
        """
        if dt.tzinfo is None:
            dt = dt.replace(tzinfo=UTC)
        local = dt.astimezone(self.tz)
        t = local.replace(tzinfo=None, microsecond=0) + timedelta(seconds=1)
        limit = t + timedelta(days=366 * _HORIZON_YEARS)
        while True:
            wall = self._next_wall(t, limit)
            if wall is None:
                return None
            aware = wall.replace(tzinfo=self.tz)
            # A wall time inside a DST gap does not exist: it does not round-trip through UTC.
            if aware.astimezone(UTC).astimezone(self.tz).replace(tzinfo=None) == wall and aware > dt:
                return aware
            t = wall + timedelta(seconds=1)

    def between(self, start: datetime, end: datetime) -> Iterator[datetime]:
        """Occurrences in ``(start, end]``, in order."""
        cur = start
        while True:
            nxt = self.next_after(cur)
            if nxt is None or nxt > (end if end.tzinfo else end.replace(tzinfo=UTC)):
                return
            yield nxt
            cur = nxt


def parse(expr: str, tz: tzinfo = UTC) -> CronSchedule:
    """Parse a 6-field NCRONTAB expression; raises ValueError naming the bad field."""
    if not isinstance(expr, str):
        raise ValueError("a cron expression must be a string")
    parts = expr.split()
    if len(parts) != 6:
        hint = (
            " (TimeSpan schedules like '00:05:00' are only honoured on App Service plans; use NCRONTAB)"
            if ":" in expr
            else ""
        )
        raise ValueError(
            f"NCRONTAB expression {expr!r} must have 6 fields "
            f"'{{second}} {{minute}} {{hour}} {{day}} {{month}} {{day-of-week}}', got {len(parts)}{hint}"
        )
    sets: list[frozenset[int]] = []
    for text, (field, low, high, names) in zip(parts, _FIELDS, strict=True):
        try:
            sets.append(_parse_field(text, field, low, high, names))
        except ValueError as exc:
            raise ValueError(f"invalid NCRONTAB expression {expr!r}: {exc}") from None
    sched = CronSchedule(expr, sets[0], sets[1], sets[2], sets[3], sets[4], sets[5], tz=tz)
    if sched.next_after(datetime(2000, 1, 1, tzinfo=UTC)) is None:
        raise ValueError(f"NCRONTAB expression {expr!r} never fires")
    return sched
