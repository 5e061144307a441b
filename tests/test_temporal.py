import dataclasses
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

from etamem.retrieval.temporal import TimeWindow, is_when_question, parse_time_window

UTC = timezone.utc
NOW = datetime(2023, 6, 15, 10, 0, tzinfo=UTC)  # a Thursday
NEW_YEAR = datetime(2024, 1, 3, 9, 0, tzinfo=UTC)  # a Wednesday
EVER = datetime(1, 1, 2, tzinfo=UTC)


def d(y, m, day, h=0):
    return datetime(y, m, day, h, tzinfo=UTC)


CASES = [
    # relative days
    ("What did I do yesterday?", d(2023, 6, 14), d(2023, 6, 15), "relative"),
    ("What did I eat today?", d(2023, 6, 15), d(2023, 6, 16), "relative"),
    ("Where am I going tonight?", d(2023, 6, 15), d(2023, 6, 16), "relative"),
    ("What did I watch this morning?", d(2023, 6, 15), d(2023, 6, 16), "relative"),
    ("What movie did I see last night?", d(2023, 6, 14), d(2023, 6, 15), "relative"),
    ("What did I buy the day before yesterday?", d(2023, 6, 13), d(2023, 6, 14), "relative"),
    ("What is planned for tomorrow?", d(2023, 6, 16), d(2023, 6, 17), "relative"),
    ("And the day after tomorrow?", d(2023, 6, 17), d(2023, 6, 18), "relative"),
    # N units ago
    ("Who did I meet 3 days ago?", d(2023, 6, 12), d(2023, 6, 13), "relative"),
    ("Who did I meet two days ago?", d(2023, 6, 13), d(2023, 6, 14), "relative"),
    ("Who called a day ago?", d(2023, 6, 14), d(2023, 6, 15), "relative"),
    ("What happened twelve days ago?", d(2023, 6, 3), d(2023, 6, 4), "relative"),
    ("What did I cook a couple of days ago?", d(2023, 6, 13), d(2023, 6, 14), "relative"),
    ("What did I cook a few days ago?", d(2023, 6, 11), d(2023, 6, 14), "relative"),
    ("Which book did I start 3 weeks ago?", d(2023, 5, 22), d(2023, 5, 29), "relative"),
    ("What did I do a week ago?", d(2023, 6, 5), d(2023, 6, 12), "relative"),
    ("Where was I a couple of weeks ago?", d(2023, 5, 29), d(2023, 6, 5), "relative"),
    ("What did I adopt two months ago?", d(2023, 4, 1), d(2023, 5, 1), "relative"),
    ("Where did I live a year ago?", d(2022, 1, 1), d(2023, 1, 1), "relative"),
    ("Where did I live 10 years ago?", d(2013, 1, 1), d(2014, 1, 1), "relative"),
    # last/this/next unit
    ("What did I do last week?", d(2023, 6, 5), d(2023, 6, 12), "relative"),
    ("What did I do the previous week?", d(2023, 6, 5), d(2023, 6, 12), "relative"),
    ("What meetings do I have this week?", d(2023, 6, 12), d(2023, 6, 19), "relative"),
    ("What is due next week?", d(2023, 6, 19), d(2023, 6, 26), "relative"),
    ("Where did I hike last weekend?", d(2023, 6, 10), d(2023, 6, 12), "relative"),
    ("Where did I hike this past weekend?", d(2023, 6, 10), d(2023, 6, 12), "relative"),
    ("Any plans this weekend?", d(2023, 6, 17), d(2023, 6, 19), "relative"),
    ("Any plans next weekend?", d(2023, 6, 24), d(2023, 6, 26), "relative"),
    ("How much did I spend last month?", d(2023, 5, 1), d(2023, 6, 1), "relative"),
    ("How much have I spent this month?", d(2023, 6, 1), d(2023, 7, 1), "relative"),
    ("What is booked next month?", d(2023, 7, 1), d(2023, 8, 1), "relative"),
    ("Where did I travel last year?", d(2022, 1, 1), d(2023, 1, 1), "relative"),
    ("What are my goals this year?", d(2023, 1, 1), d(2024, 1, 1), "relative"),
    # rolling windows
    ("What did I read in the past 3 days?", d(2023, 6, 12, 10), NOW, "relative"),
    ("What did I buy in the last two weeks?", d(2023, 6, 1, 10), NOW, "relative"),
    ("What did I do over the past week?", d(2023, 6, 8, 10), NOW, "relative"),
    ("What have I been doing recently?", d(2023, 5, 16, 10), NOW, "relative"),
    ("Have I been sleeping well lately?", d(2023, 5, 16, 10), NOW, "relative"),
    # weekdays (now is Thursday 15 June)
    ("What did I do last Friday?", d(2023, 6, 9), d(2023, 6, 10), "relative"),
    ("Who did I see on Friday?", d(2023, 6, 9), d(2023, 6, 10), "relative"),
    ("What did I eat last Monday?", d(2023, 6, 12), d(2023, 6, 13), "relative"),
    ("What did I do on Thursday?", d(2023, 6, 8), d(2023, 6, 9), "relative"),
    ("What is planned next Friday?", d(2023, 6, 16), d(2023, 6, 17), "relative"),
    ("Is the party this Saturday?", d(2023, 6, 17), d(2023, 6, 18), "relative"),
    ("What is planned next Thursday?", d(2023, 6, 22), d(2023, 6, 23), "relative"),
    ("What did I do last Thursday?", d(2023, 6, 8), d(2023, 6, 9), "relative"),
    # absolute
    ("What did Caroline do in May 2023?", d(2023, 5, 1), d(2023, 6, 1), "absolute"),
    ("What did Caroline do during May 2023?", d(2023, 5, 1), d(2023, 6, 1), "absolute"),
    ("Events of May 2023", d(2023, 5, 1), d(2023, 6, 1), "absolute"),
    ("Sept 2022 trips", d(2022, 9, 1), d(2022, 10, 1), "absolute"),
    ("What happened on 8 May 2023?", d(2023, 5, 8), d(2023, 5, 9), "absolute"),
    ("What happened on 8 May, 2023?", d(2023, 5, 8), d(2023, 5, 9), "absolute"),
    ("What happened on May 8, 2023?", d(2023, 5, 8), d(2023, 5, 9), "absolute"),
    ("What happened on May 8th 2023?", d(2023, 5, 8), d(2023, 5, 9), "absolute"),
    ("What happened on the 8th of May 2023?", d(2023, 5, 8), d(2023, 5, 9), "absolute"),
    ("What happened on 2023-05-08?", d(2023, 5, 8), d(2023, 5, 9), "absolute"),
    ("What happened on 2023/05/08?", d(2023, 5, 8), d(2023, 5, 9), "absolute"),
    ("What happened in 2023-05?", d(2023, 5, 1), d(2023, 6, 1), "absolute"),
    ("Where did Jon travel in 2022?", d(2022, 1, 1), d(2023, 1, 1), "absolute"),
    ("What happened in early May 2023?", d(2023, 5, 1), d(2023, 5, 11), "absolute"),
    ("What happened in mid-May 2023?", d(2023, 5, 11), d(2023, 5, 21), "absolute"),
    ("What happened in mid May 2023?", d(2023, 5, 11), d(2023, 5, 21), "absolute"),
    ("What happened in late May 2023?", d(2023, 5, 21), d(2023, 6, 1), "absolute"),
    ("What happened in late February 2024?", d(2024, 2, 21), d(2024, 3, 1), "absolute"),
    ("What happened at the end of May 2023?", d(2023, 5, 21), d(2023, 6, 1), "absolute"),
    ("What happened at the beginning of March 2023?", d(2023, 3, 1), d(2023, 3, 11), "absolute"),
    ("What happened in early 2022?", d(2022, 1, 1), d(2022, 5, 1), "absolute"),
    ("What happened in late 2022?", d(2022, 9, 1), d(2023, 1, 1), "absolute"),
    ("What did I do the week of 8 May 2023?", d(2023, 5, 8), d(2023, 5, 15), "absolute"),
    ("What did I do the week of 10 May 2023?", d(2023, 5, 8), d(2023, 5, 15), "absolute"),
    ("What did I do the week of May 10?", d(2023, 5, 8), d(2023, 5, 15), "absolute"),
    ("What did I do the first week of May 2023?", d(2023, 5, 1), d(2023, 5, 8), "absolute"),
    ("What did I do in the second week of June 2023?", d(2023, 6, 8), d(2023, 6, 15), "absolute"),
    ("What did I do in the last week of May 2023?", d(2023, 5, 25), d(2023, 6, 1), "absolute"),
    ("What did I do the last week of December 2022?", d(2022, 12, 25), d(2023, 1, 1), "absolute"),
    ("What did I do the week of May 2023?", d(2023, 5, 1), d(2023, 6, 1), "absolute"),
    # month / date without a year, resolved against now (June 2023)
    ("What did I plant in May?", d(2023, 5, 1), d(2023, 6, 1), "absolute"),
    ("What did I plant in June?", d(2023, 6, 1), d(2023, 7, 1), "absolute"),
    ("Where did I go in July?", d(2022, 7, 1), d(2022, 8, 1), "absolute"),
    ("Where did I go in March?", d(2023, 3, 1), d(2023, 4, 1), "absolute"),
    ("What happened in early May?", d(2023, 5, 1), d(2023, 5, 11), "absolute"),
    ("What happened on 8 May?", d(2023, 5, 8), d(2023, 5, 9), "absolute"),
    ("What happened on May 8?", d(2023, 5, 8), d(2023, 5, 9), "absolute"),
    ("What happened on 20 June?", d(2022, 6, 20), d(2022, 6, 21), "absolute"),
    ("Where did I go last March?", d(2023, 3, 1), d(2023, 4, 1), "absolute"),
    ("Where did I go last July?", d(2022, 7, 1), d(2022, 8, 1), "absolute"),
    ("Where did I go last June?", d(2022, 6, 1), d(2022, 7, 1), "absolute"),
    ("Where will I go next March?", d(2024, 3, 1), d(2024, 4, 1), "absolute"),
    # offsets from an anchor
    ("What did I do two days before 8 May 2023?", d(2023, 5, 6), d(2023, 5, 7), "before"),
    ("What did I do the day before 8 May 2023?", d(2023, 5, 7), d(2023, 5, 8), "before"),
    ("What did I do a few days before 8 May 2023?", d(2023, 5, 4), d(2023, 5, 7), "before"),
    ("What did I do a week after 8 May 2023?", d(2023, 5, 15), d(2023, 5, 16), "after"),
    ("What did I do the day after 8 May 2023?", d(2023, 5, 9), d(2023, 5, 10), "after"),
    ("What did I do a month after May 2023?", d(2023, 6, 1), d(2023, 7, 1), "after"),
    ("What did I do one year before 2023-05-08?", d(2022, 5, 8), d(2022, 5, 9), "before"),
    ("What did I do two days after last Friday?", d(2023, 6, 11), d(2023, 6, 12), "after"),
    # first / latest: everything before now
    ("When did I first go hiking?", EVER, NOW, "first"),
    ("What was the earliest trip I took?", EVER, NOW, "first"),
    ("When did I try sushi for the first time?", EVER, NOW, "first"),
    ("What is my latest hobby?", EVER, NOW, "latest"),
    ("What was the most recent concert I went to?", EVER, NOW, "latest"),
    ("When did I most recently see Anna?", EVER, NOW, "latest"),
    ("When was the last time I went swimming?", EVER, NOW, "latest"),
    ("What was the last book I read?", EVER, NOW, "latest"),
    # case-insensitivity
    ("WHAT DID I DO YESTERDAY?", d(2023, 6, 14), d(2023, 6, 15), "relative"),
    ("what did i do in may 2023?", d(2023, 5, 1), d(2023, 6, 1), "absolute"),
]


@pytest.mark.parametrize("question, start, end, kind", CASES, ids=[c[0] for c in CASES])
def test_forms(question, start, end, kind):
    w = parse_time_window(question, NOW)
    assert w is not None
    assert (w.start, w.end, w.kind) == (start, end, kind)
    assert w.expression and w.expression.lower() in question.lower()


@pytest.mark.parametrize("question, expression", [
    ("What did I do the day before yesterday?", "the day before yesterday"),
    ("What did I do two days before 8 May 2023?", "two days before 8 May 2023"),
    ("What did Caroline do in May 2023?", "in May 2023"),
    ("When was the last time I went swimming?", "the last time"),
    ("What did I do last Friday?", "last Friday"),
    ("What happened on May 8, 2023?", "May 8, 2023"),
])
def test_expression_text(question, expression):
    assert parse_time_window(question, NOW).expression == expression


@pytest.mark.parametrize("question, start, end, kind", [
    ("What did I do last month?", d(2023, 12, 1), d(2024, 1, 1), "relative"),
    ("What did I do last week?", d(2023, 12, 25), d(2024, 1, 1), "relative"),
    ("What did I do last year?", d(2023, 1, 1), d(2024, 1, 1), "relative"),
    ("What did I do yesterday?", d(2024, 1, 2), d(2024, 1, 3), "relative"),
    ("What did I do 3 days ago?", d(2023, 12, 31), d(2024, 1, 1), "relative"),
    ("What did I do two months ago?", d(2023, 11, 1), d(2023, 12, 1), "relative"),
    ("What did I do last Friday?", d(2023, 12, 29), d(2023, 12, 30), "relative"),
    ("What did I do in December?", d(2023, 12, 1), d(2024, 1, 1), "absolute"),
    ("What did I do in January?", d(2024, 1, 1), d(2024, 2, 1), "absolute"),
    ("What did I do on 30 December?", d(2023, 12, 30), d(2023, 12, 31), "absolute"),
    ("What did I do this week?", d(2024, 1, 1), d(2024, 1, 8), "relative"),
    ("What did I do a week after 28 December 2023?", d(2024, 1, 4), d(2024, 1, 5), "after"),
])
def test_year_boundary(question, start, end, kind):
    w = parse_time_window(question, NEW_YEAR)
    assert (w.start, w.end, w.kind) == (start, end, kind)


def test_in_month_resolves_to_previous_year_when_now_is_earlier():
    w = parse_time_window("What did I do in May?", datetime(2023, 3, 10, tzinfo=UTC))
    assert (w.start, w.end) == (d(2022, 5, 1), d(2022, 6, 1))
    w = parse_time_window("What did I do in March?", datetime(2023, 3, 10, tzinfo=UTC))
    assert (w.start, w.end) == (d(2023, 3, 1), d(2023, 4, 1))


@pytest.mark.parametrize("question, expression, start, end", [
    ("Did I go out last week or yesterday?", "yesterday", d(2023, 6, 14), d(2023, 6, 15)),
    ("Between May 2023 and 8 May 2023, what happened?", "8 May 2023", d(2023, 5, 8), d(2023, 5, 9)),
    ("What did I first do last week?", "last week", d(2023, 6, 5), d(2023, 6, 12)),
    ("Recently, say last week, what did I do?", "last week", d(2023, 6, 5), d(2023, 6, 12)),
    # same-length windows: the first occurrence wins
    ("Was it on 9 May 2023 or on 8 May 2023?", "9 May 2023", d(2023, 5, 9), d(2023, 5, 10)),
    ("Was it last night or yesterday?", "last night", d(2023, 6, 14), d(2023, 6, 15)),
])
def test_most_specific_wins(question, expression, start, end):
    w = parse_time_window(question, NOW)
    assert (w.expression, w.start, w.end) == (expression, start, end)


@pytest.mark.parametrize("question", [
    "What did Caroline paint?",
    "What may Caroline do?",
    "May I ask what Jon likes?",
    "Did Jon march in the parade?",
    "Did they march with the marching band?",
    "What did August say about the mayor?",
    "Did June like the book?",
    "Where did Caroline go on vacation?",
    "What does Melanie do on Fridays?",
    "How many days did the trip last?",
    "What is in the past tense of run?",
    "How many kids does Melanie have?",
    "",
])
def test_no_time_expression(question):
    assert parse_time_window(question, NOW) is None


@pytest.mark.parametrize("question, start, end", [
    ("What did Caroline do in May 2023?", d(2023, 5, 1), d(2023, 6, 1)),
    ("What happened on 8 May, 2023?", d(2023, 5, 8), d(2023, 5, 9)),
    ("What happened on 2023-05-08?", d(2023, 5, 8), d(2023, 5, 9)),
    ("Where did Jon travel in 2022?", d(2022, 1, 1), d(2023, 1, 1)),
    ("What did I do two days before 8 May 2023?", d(2023, 5, 6), d(2023, 5, 7)),
])
def test_now_none_absolute(question, start, end):
    w = parse_time_window(question, None)
    assert (w.start, w.end) == (start, end)
    assert w.start.tzinfo is UTC


@pytest.mark.parametrize("question", [
    "What did I do yesterday?", "What did I do last week?", "What did I do in May?",
    "What happened on 8 May?", "What did I do 3 days ago?", "When did I first go hiking?",
    "What have I been doing recently?", "What did I do two days before yesterday?",
])
def test_now_none_relative(question):
    assert parse_time_window(question, None) is None


def test_timezone_preserved_and_local_days():
    ny = ZoneInfo("America/New_York")
    now = datetime(2023, 6, 15, 22, 0, tzinfo=ny)  # already 16 June in UTC
    w = parse_time_window("What did I do yesterday?", now)
    assert w.start == datetime(2023, 6, 14, tzinfo=ny) and w.end == datetime(2023, 6, 15, tzinfo=ny)
    assert w.start.tzinfo is ny and w.start.utcoffset() == timedelta(hours=-4)
    w = parse_time_window("What did I do in May 2023?", now)
    assert w.start.tzinfo is ny and w.start == datetime(2023, 5, 1, tzinfo=ny)
    fixed = timezone(timedelta(hours=2))
    w = parse_time_window("What did I do last week?", datetime(2023, 6, 15, 1, tzinfo=fixed))
    assert w.start.tzinfo is fixed and w.start == datetime(2023, 6, 5, tzinfo=fixed)


def test_naive_now_is_utc():
    w = parse_time_window("What did I do yesterday?", datetime(2023, 6, 15, 10))
    assert (w.start, w.end) == (d(2023, 6, 14), d(2023, 6, 15))


def test_contains_and_distance():
    w = TimeWindow(d(2023, 5, 8), d(2023, 5, 9), "8 May 2023", "absolute")
    assert w.contains(d(2023, 5, 8)) and w.contains(d(2023, 5, 8, 23))
    assert not w.contains(d(2023, 5, 9)) and not w.contains(d(2023, 5, 7, 23))
    assert w.distance(d(2023, 5, 8, 12)) == timedelta(0)
    assert w.distance(d(2023, 5, 6, 12)) == timedelta(hours=36)
    assert w.distance(d(2023, 5, 11)) == timedelta(days=2)
    paris = ZoneInfo("Europe/Paris")  # 8 May 01:30 Paris is 7 May 23:30 UTC
    assert not w.contains(datetime(2023, 5, 8, 1, 30, tzinfo=paris))
    assert w.distance(datetime(2023, 5, 8, 1, 30, tzinfo=paris)) == timedelta(minutes=30)
    assert w.contains(datetime(2023, 5, 8, 12))  # naive -> the window's timezone
    with pytest.raises(dataclasses.FrozenInstanceError):
        w.start = d(2020, 1, 1)  # frozen


def test_first_latest_window_contains_past_only():
    w = parse_time_window("When did I first go hiking?", NOW)
    assert w.contains(d(1990, 1, 1)) and w.contains(NOW - timedelta(seconds=1))
    assert not w.contains(NOW)


@pytest.mark.parametrize("question", [
    "When did Caroline go to the LGBTQ support group?",
    "when was my last dentist appointment?",
    "Do you remember when did I adopt the cat?",
    "What date did I buy the bike?",
    "On what day did Melanie paint the sunrise?",
    "What year did Jon start his business?",
    "In which month did I visit Paris?",
    "Which week did I start the course?",
    "What time does the class start?",
    "How long ago did I move to Berlin?",
    "How many days ago did I buy the car?",
    "How many weeks have passed since I started running?",
    "How many days passed between the concert and the trip?",
    "How many months before the wedding did I buy the dress?",
    "How many years after graduating did I move?",
    "Since when have I been vegetarian?",
])
def test_is_when_question_true(question):
    assert is_when_question(question) is True


@pytest.mark.parametrize("question", [
    "What did Caroline paint?",
    "Where did I go when I was in Paris?",
    "How long did the trip last?",
    "How many days did I spend in Japan before going to Korea?",
    "How many kids does Melanie have?",
    "Who did I meet yesterday?",
    "What may Caroline do?",
    "Why did Jon start a dance studio?",
    "",
])
def test_is_when_question_false(question):
    assert is_when_question(question) is False
