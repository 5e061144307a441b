"""Synthetic two-speaker dialogues with known topic changes, for the FTA segmentation tests.

Each dialogue is (speaker A, speaker B, topics); a topic is a list of turns, speakers
alternate A, B, A, ... across the whole dialogue. The gold boundaries are the turn indices
where a topic starts (except the first). Some shifts are marked by a cue phrase ("by the way",
"anyway", ...), many are not; some topics open with a question; some turns are filler.
Written for these tests (no dataset text).
"""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

from etamem.records import Turn

DIALOGUES: list[tuple[str, str, list[list[str]]]] = [
    ("Maya", "Leo", [
        ["Hey Leo! I finally tried that sourdough recipe you sent me.",
         "Nice! How did the loaf turn out?",
         "The crust was perfect but the crumb was really dense, kind of gummy inside.",
         "Sounds like it needed a longer proof. How long did you let the dough rise?",
         "Only about four hours, my kitchen is pretty cold.",
         "Try proofing it overnight in the fridge, the flavour gets better too."],
        ["By the way, did you hear back about the job interview at the architecture firm?",
         "Yes! They called on Monday and offered me the junior designer position.",
         "That's amazing, congratulations! When do you start?",
         "In two weeks. I'm nervous about the commute though, it's almost an hour by train.",
         "You can sketch on the train, that's what my sister does on her commute."],
        ["Oh, are you still going to Lisbon in August?",
         "We booked the flights last night, we land on the 12th.",
         "Lucky you. Make sure to ride tram 28 and eat pastéis de nata in Belém.",
         "I wrote both down. Do you know a good neighbourhood for the hotel?",
         "Alfama is charming but hilly, Baixa is flatter and closer to everything."],
    ]),
    ("Sam", "Priya", [
        ["My dog Biscuit has been limping since the weekend.",
         "Oh no, poor thing. Did you take him to the vet?",
         "Yes, they said it's a sprained paw and he needs to rest for ten days.",
         "Keeping a beagle calm for ten days sounds impossible.",
         "Tell me about it, he keeps trying to jump on the sofa.",
         "Maybe a puzzle feeder would keep his mind busy."],
        ["I started training for the half marathon in October.",
         "Wow, how many kilometres are you running each week?",
         "About twenty five right now, with one long run on Sundays.",
         "Are you following a plan from an app?",
         "Yes, a twelve week beginner plan. My knees hurt a little after the long runs."],
        ["Anyway, how is your new apartment?",
         "I love it, but the heating is broken and the landlord hasn't fixed it yet.",
         "That's awful in this weather. Have you reported it in writing?",
         "I emailed him twice. If he doesn't answer by Friday I'll call the tenant office.",
         "Good idea, keep copies of every email."],
    ]),
    ("Nora", "Ben", [
        ["I've been reading a great mystery novel set in Iceland.",
         "Which one? I need something for my book club.",
         "It's about a detective investigating a disappearance in a small fishing village.",
         "Is it very dark? Our club didn't like the last grim thriller.",
         "It's tense but not gory, and the landscape descriptions are beautiful.",
         "Great, I'll suggest it for the March meeting."],
        ["My car broke down on the highway yesterday.",
         "Oh no! Were you okay?",
         "Yeah, I pulled over safely. The mechanic says the alternator failed.",
         "Is it expensive to replace?",
         "Around four hundred dollars including labour. It should be ready Thursday.",
         "At least it wasn't the engine."],
        ["Speaking of expenses, I finally set up a budget spreadsheet.",
         "Good for you. What made you start?",
         "I want to save enough for a down payment on a house within three years.",
         "Do you track every coffee?",
         "Every single one. I spent ninety dollars on coffee last month, which shocked me."],
        ["How is your daughter liking kindergarten?",
         "She loves her teacher and she already has a best friend called Ava.",
         "That's so sweet. Does she still cry at drop off?",
         "Not anymore, she runs in without even saying goodbye now.",
         "Kids adapt so fast."],
    ]),
    ("Omar", "Lucy", [
        ["The tomatoes in my garden are finally turning red.",
         "That's exciting! What variety did you plant?",
         "Cherry tomatoes and a few big beefsteaks. The beefsteaks have some cracks though.",
         "Cracking usually comes from uneven watering.",
         "Makes sense, we had that heavy rain after a dry week.",
         "Mulch helps keep the soil moisture steady."],
        ["I went to the Coldplay concert on Saturday night.",
         "No way! How was it?",
         "Incredible, the whole stadium lit up with those LED wristbands.",
         "Did they play Yellow?",
         "They did, everyone sang along. My voice is still hoarse."],
        ["On another note, my brother is getting married in June.",
         "Congratulations to him! Are you in the wedding party?",
         "I'm the best man, so I have to write a speech and I'm terrified.",
         "Just tell a funny story and keep it under five minutes.",
         "I'm thinking of telling the story about our camping trip when he lost the tent."],
    ]),
    ("Grace", "Tom", [
        ["I switched my laptop to Linux last week.",
         "Brave move. Which distribution did you pick?",
         "Fedora. Everything worked except the fingerprint reader.",
         "That's common, those drivers are rarely supported.",
         "I can live without it. The battery life is actually better now.",
         "Nice, that's usually the other way around."],
        ["How was your trip to your grandmother's farm?",
         "Lovely and quiet. I helped her milk the goats every morning.",
         "Ha, did you get good at it?",
         "By the third day I was faster than her farmhand.",
         "She must have been proud.",
         "She was, and she sent me home with three jars of goat cheese."],
        ["I've been having trouble sleeping lately.",
         "Since when?",
         "About a month, I keep waking up at three in the morning worrying about work.",
         "Have you tried putting your phone away an hour before bed?",
         "Not yet, I usually scroll until I fall asleep.",
         "Try reading a paper book instead, it helped me a lot."],
    ]),
    ("Ava", "Raj", [
        ["We adopted a kitten from the shelter on Sunday!",
         "Aww, what's her name?",
         "Pepper. She's grey with white paws and she hides under the bed all day.",
         "She'll come out once she feels safe, give her a few days.",
         "I put a blanket that smells like us in her hiding spot."],
        ["Guess what, I got promoted to team lead.",
         "That's fantastic news! How big is the team?",
         "Six engineers. I'm excited but also worried about managing my former peers.",
         "Set up one on one meetings early, it builds trust.",
         "Good advice, I'll schedule them next week."],
        ["Did you end up fixing the leak in your bathroom?",
         "Finally, a plumber replaced the pipe under the sink on Wednesday.",
         "How much did that cost you?",
         "Two hundred and fifty dollars, plus I had to repaint the cabinet.",
         "Ugh, water damage is the worst."],
        ["By the way, are you coming to the board game night on Friday?",
         "Definitely. Should I bring Catan or Ticket to Ride?",
         "Bring Ticket to Ride, we played Catan last time.",
         "Okay, and I'll bring some snacks too."],
    ]),
    ("Elena", "Marcus", [
        ["I finally signed up for pottery classes.",
         "Oh fun! Are you using the wheel already?",
         "Only hand building for the first month, then we move to the wheel.",
         "What did you make in the first class?",
         "A lopsided little bowl. It's drying now and we glaze it next week."],
        ["My mom has been in the hospital since Tuesday.",
         "I'm so sorry. Is she going to be okay?",
         "The doctors think it's pneumonia, and she's responding well to the antibiotics.",
         "That's a relief. Are you able to visit her?",
         "Every evening after work. It's exhausting but I want to be there.",
         "Please take care of yourself too."],
        ["Anyway, did you watch the new season of that space drama?",
         "I binged all eight episodes over the weekend!",
         "No spoilers, I'm only on episode three.",
         "Okay, but the ending of episode five will blow your mind.",
         "Now I have to watch it tonight."],
    ]),
    ("Chris", "Hana", [
        ["I'm thinking about learning Japanese before our trip next spring.",
         "That's ambitious. Are you taking a course?",
         "I'm using an app every day and I just learned hiragana.",
         "Katakana will be easier after that.",
         "I hope so, kanji scares me though.",
         "Focus on travel phrases first, you won't need many kanji."],
        ["My basketball team won the city league final yesterday.",
         "Congrats! Was it a close game?",
         "We were down by six with two minutes left and came back to win by one.",
         "Who scored the winning basket?",
         "Our point guard, a three pointer right at the buzzer."],
        ["Have you found a new place to live yet?",
         "We signed a lease for a two bedroom near the river.",
         "When do you move in?",
         "On the first of next month. I still need to hire movers.",
         "Book them soon, they get busy at the end of the month."],
    ]),
    ("Ivy", "Daniel", [
        ["I've been volunteering at the food bank on Saturdays.",
         "That's wonderful. What do you do there?",
         "Mostly sorting donations and packing boxes for families.",
         "How many families do they help each week?",
         "Around three hundred, and the number keeps growing.",
         "That's a lot of people."],
        ["Oh, before I forget, I found your blue scarf in my car.",
         "I wondered where it went! Can you bring it on Monday?",
         "Sure, I'll put it in my bag tonight.",
         "Thanks, it was a gift from my aunt."],
        ["I'm worried about my brother, he lost his job last month.",
         "That's tough. How is he handling it?",
         "He seems down and he stopped going to the gym.",
         "Maybe invite him for a hike, getting outside might help.",
         "Good idea, I'll ask him this weekend.",
         "Let me know if he needs help with his resume."],
        ["Did you try the new Thai restaurant downtown?",
         "Yes, the green curry was the best I've had.",
         "Was it very spicy?",
         "Medium spicy, but they let you choose the level."],
    ]),
    ("Jonah", "Mia", [
        ["I'm repainting my living room this weekend.",
         "What colour are you going with?",
         "A sage green, with white trim around the windows.",
         "That sounds calming. Are you doing it yourself?",
         "Yes, I bought rollers, tape and two gallons of paint yesterday."],
        ["My sister just had a baby boy on Thursday.",
         "Congratulations, you're an uncle! What's his name?",
         "Theo. He was seven pounds and he has a full head of dark hair.",
         "Have you met him yet?",
         "I'm visiting them at the hospital tomorrow morning.",
         "Bring your sister some real food, hospital meals are terrible."],
        ["Enough about me, how is your thesis going?",
         "Slowly. My advisor wants me to rerun all the experiments with a bigger dataset.",
         "Ouch, how long will that take?",
         "Probably two months, so my defense moves to December.",
         "At least the results will be stronger."],
    ]),
    ("Zoe", "Kenji", [
        ["I went scuba diving for the first time in Thailand.",
         "Wow! Were you scared underwater?",
         "A little at first, but then I saw a sea turtle and forgot about my nerves.",
         "How deep did you go?",
         "Twelve metres, with an instructor holding my hand the whole time.",
         "That sounds unforgettable."],
        ["My landlord is raising the rent by two hundred dollars in March.",
         "That's a big jump. Can you negotiate?",
         "I'm going to ask for a smaller increase since I've lived there five years.",
         "Mention that you always pay on time.",
         "Good point, I'll write to him this week."],
        ["Speaking of money, I finally paid off my student loan!",
         "That's huge! How long did it take?",
         "Seven years of payments. I celebrated with a fancy dinner last night.",
         "You earned it."],
        ["Is your son still playing the violin?",
         "Yes, he has his first recital in two weeks and he practises every evening.",
         "Is he nervous?",
         "Not at all, he's more worried about what to wear.",
         "That's adorable."],
    ]),
    ("Felix", "Rosa", [
        ["I ran my first 10k race on Sunday.",
         "Nice! What was your time?",
         "Fifty eight minutes, I wanted to finish under an hour so I'm thrilled.",
         "Did you train for long?",
         "About two months, three runs a week.",
         "Maybe a half marathon is next."],
        ["My company is moving everyone back to the office full time.",
         "Oh no, how do you feel about that?",
         "Frustrated, I got used to working from home and my commute is forty minutes.",
         "Could you ask for two remote days?",
         "My manager said she'd try, but HR is strict about it."],
        ["By the way, I started learning the guitar.",
         "Cool, acoustic or electric?",
         "Acoustic. My fingertips hurt so much after practising chords.",
         "That goes away once you build calluses.",
         "I hope so, I want to play a song at my friend's birthday in May."],
    ]),
    ("Lena", "Paul", [
        ["We're planning a camping trip to the lake next month.",
         "Fun! Are you bringing the kids?",
         "Yes, both of them, it's their first time sleeping in a tent.",
         "Pack extra blankets, nights by the lake get cold.",
         "Good tip, I'll also bring the camping stove."],
        ["My doctor told me my cholesterol is high.",
         "Oh, what did she suggest?",
         "Cutting down on red meat and walking thirty minutes a day.",
         "Are you going to follow it?",
         "I've already started, I walked to work every day this week.",
         "That's a great start."],
        ["Did you watch the football match last night?",
         "Yes, what a disaster for our team, they lost three to nothing.",
         "The defence was terrible in the second half.",
         "The coach has to change something before the derby."],
    ]),
    ("Tara", "Sean", [
        ["I started a new job as a nurse at the children's hospital.",
         "That's wonderful! How were your first shifts?",
         "Exhausting, twelve hours on my feet, but the kids are so brave.",
         "Do you work nights too?",
         "Two night shifts a week for now.",
         "Make sure you get enough rest between them."],
        ["I tried making homemade ramen last weekend.",
         "From scratch? Even the noodles?",
         "Even the noodles! The broth simmered for eight hours.",
         "How did it taste?",
         "Rich and salty, but the noodles were too thick."],
        ["Anyway, have you decided where to go for your birthday?",
         "I'm thinking of a weekend in the mountains with a few friends.",
         "That sounds perfect. Will you rent a cabin?",
         "Yes, there's one with a hot tub near the ski lift.",
         "Count me in!"],
    ]),
    # one long topic each: no gold boundary, so every cut placed here is a false alarm
    ("Hannah", "Victor", [
        ["I can't stop thinking about the argument I had with my manager this morning.",
         "What happened?",
         "She criticised my report in front of the whole team, and I felt humiliated.",
         "That sounds really painful. Did she say what was wrong with it?",
         "She said the numbers were out of date, but nobody told me the data had changed.",
         "So it wasn't really your fault.",
         "No, and I'm angry that she didn't ask me first before calling it out.",
         "Would you feel able to talk to her about it privately?",
         "Maybe. I'm afraid she'll think I'm being defensive.",
         "You could start by asking how the team should share data updates in future.",
         "That feels less confrontational, like I'm trying to fix the process.",
         "Exactly, and you can mention how it felt to be corrected in public.",
         "I'll ask her for ten minutes tomorrow afternoon.",
         "Write down the two or three points you want to make beforehand.",
         "Good idea. I already feel a bit calmer about it.",
         "I'm glad. You handled a hard morning well."],
    ]),
    ("Ruth", "Alex", [
        ["We finally started planning the wedding.",
         "Exciting! Have you picked a date?",
         "The third Saturday of September, at a vineyard outside the city.",
         "A vineyard wedding sounds beautiful. How many guests?",
         "Around a hundred and twenty, which is already more than we wanted.",
         "Guest lists always grow. Who is doing the catering?",
         "The vineyard has its own caterer, so we just choose a menu.",
         "That makes it easier. Have you done a tasting yet?",
         "Next week. I'm hoping the vegetarian option is good, half my family doesn't eat meat.",
         "Ask them for a mushroom risotto, those are usually a hit.",
         "Noted. We also still need a photographer.",
         "My cousin shot our wedding, I can send you her portfolio.",
         "Please do! And I have to find a dress before June.",
         "Start early, alterations take weeks.",
         "I have my first fitting appointment on Saturday."],
    ]),
]

BASE = datetime(2023, 5, 8, 18, 0, tzinfo=timezone.utc)


def dialogue_turns(index: int, *, session_id: str | None = None, step: timedelta = timedelta(minutes=1)
                   ) -> tuple[list[Turn], list[int]]:
    """Turns of dialogue `index` (one session) and its gold boundaries (topic starts, not 0)."""
    a, b, topics = DIALOGUES[index]
    turns: list[Turn] = []
    gold: list[int] = []
    sid = session_id or f"dlg{index}"
    for topic in topics:
        if turns:
            gold.append(len(turns))
        for text in topic:
            i = len(turns)
            turns.append(Turn(turn_id=f"{sid}:{i}", session_id=sid, speaker=a if i % 2 == 0 else b, text=text,
                              timestamp=BASE + step * i))
    return turns, gold


def long_sessions(group: int = 4) -> list[tuple[list[Turn], list[int]]]:
    """The dialogues concatenated `group` at a time into long sessions (several BWS windows
    each); a join between two dialogues is a gold boundary too."""
    out = []
    for g in range(0, len(DIALOGUES), group):
        turns: list[Turn] = []
        gold: list[int] = []
        sid = f"long{g // group}"
        for i in range(g, min(g + group, len(DIALOGUES))):
            part, part_gold = dialogue_turns(i)
            if turns:
                gold.append(len(turns))
            gold.extend(len(turns) + b for b in part_gold)
            for t in part:
                k = len(turns)
                turns.append(Turn(turn_id=f"{sid}:{k}", session_id=sid, speaker=t.speaker, text=t.text,
                                  timestamp=BASE + timedelta(minutes=k)))
        out.append((turns, gold))
    return out


def boundary_quality(detector, *, window: int = 20, tolerance: int = 1) -> dict:
    """Boundary precision / recall / F1 of BWS with `detector` on the dialogues one by one and on
    the long sessions, with a `tolerance` in turns."""
    from etamem.fta.segmentation import BoundaryScore, score_boundaries, segment_session, segment_starts

    figures = {}
    for name, data in (("dialogues", [dialogue_turns(i) for i in range(len(DIALOGUES))]),
                       ("long_sessions", long_sessions())):
        total = BoundaryScore(0, 0, 0)
        windows = 0
        for turns, gold in data:
            seg = segment_session(turns, detector, window=window)
            windows += seg.windows
            total = total + score_boundaries(segment_starts(seg.segments), gold, tolerance)
        figures[name] = {"sessions": len(data), "turns": sum(len(t) for t, _ in data), "gold": total.gold,
                         "predicted": total.predicted, "matched": total.matched,
                         "precision": round(total.precision, 3), "recall": round(total.recall, 3),
                         "f1": round(total.f1, 3), "windows": windows}
    return figures


if __name__ == "__main__":  # python tests/fta_dialogues.py: the figures for the README
    import json
    import os
    import sys

    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from etamem.fta.segmentation import OfflineBoundaryDetector
    from etamem.models.encoders import SentenceTransformerEncoder

    encoder = SentenceTransformerEncoder("minilm", device="cpu")
    print("offline detector (all-MiniLM-L6-v2), BWS W=20, +-1 turn:")
    print(json.dumps(boundary_quality(OfflineBoundaryDetector(encoder)), indent=2))
    print("cue phrases and time gaps only (no encoder):")
    print(json.dumps(boundary_quality(OfflineBoundaryDetector(None)), indent=2))
