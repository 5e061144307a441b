from datetime import datetime, timedelta, timezone

import pytest

from etamem.ingest.timeparse import format_date, parse_timestamp


@pytest.mark.parametrize("text, expected", [
    ("1:56 pm on 8 May, 2023", datetime(2023, 5, 8, 13, 56, tzinfo=timezone.utc)),
    ("12:05 am on 1 January, 2024", datetime(2024, 1, 1, 0, 5, tzinfo=timezone.utc)),
    ("12:30 pm on 3 Sept, 2022", datetime(2022, 9, 3, 12, 30, tzinfo=timezone.utc)),
    ("2023/05/20 (Sat) 02:21", datetime(2023, 5, 20, 2, 21, tzinfo=timezone.utc)),
    ("2023/05/20", datetime(2023, 5, 20, tzinfo=timezone.utc)),
    ("2023-05-08T13:56:00Z", datetime(2023, 5, 8, 13, 56, tzinfo=timezone.utc)),
    ("2023-05-08", datetime(2023, 5, 8, tzinfo=timezone.utc)),
])
def test_formats(text, expected):
    got = parse_timestamp(text)
    assert got == expected and got.tzinfo is not None


def test_offsets_and_default_timezone():
    got = parse_timestamp("2023-05-08 13:56+02:00")
    assert got.utcoffset() == timedelta(hours=2)
    paris = parse_timestamp("2023-05-08 13:56", "Europe/Paris")
    assert paris.utcoffset() == timedelta(hours=2)  # CEST
    naive = parse_timestamp(datetime(2023, 1, 1, 12))
    assert naive.tzinfo is timezone.utc


@pytest.mark.parametrize("bad", ["", "   ", "yesterday", "13:56 pm on 8 May, 2023", "1:56 pm on 31 February, 2023",
                                 "2023/13/01", None, 12345])
def test_rejects(bad):
    with pytest.raises(ValueError, match="timestamp"):
        parse_timestamp(bad)


def test_format_date():
    assert format_date(datetime(2023, 5, 8, tzinfo=timezone.utc)) == "8 May 2023"
