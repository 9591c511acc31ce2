"""LongMemEval-layout files made from a pool of short sessions written for these tests.

As in LongMemEval-S, the questions' haystacks share sessions (same id, same turns) and each
haystack dates its sessions on its own calendar, so a session appears under several dates.
``longmemeval_file(n)`` writes ``n`` questions, each over ``per_question`` sessions of the pool,
deterministically.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

# (session id, [(role, text), ...], index of the turn that answers the session's question,
#  the question, its answer). Written for these tests.
POOL: list[tuple[str, list[tuple[str, str]], int, str, str]] = [
    ("s_kayak", [("user", "I bought a second-hand kayak for 300 euros last weekend."),
                 ("assistant", "Nice find! Check the hull for cracks and rinse it after salt water."),
                 ("user", "The seller threw in a paddle and a spray skirt."),
                 ("assistant", "That is a good deal; a spray skirt keeps you dry in waves.")],
     0, "How much did I pay for my kayak?", "300 euros"),
    ("s_bread", [("user", "My sourdough starter smells like nail polish remover."),
                 ("assistant", "That acetone smell means it is hungry; feed it twice a day."),
                 ("user", "I keep it on top of the fridge where it is warm."),
                 ("assistant", "Warmth speeds it up, so it needs feeding more often.")],
     0, "What did my sourdough starter smell like?", "nail polish remover"),
    ("s_chess", [("user", "I joined the chess club that meets on Thursday evenings."),
                 ("assistant", "Club nights are a great way to practise endgames."),
                 ("user", "My rating is 1350 and I want to reach 1500 by summer."),
                 ("assistant", "Solving tactics puzzles daily is the fastest way to gain rating.")],
     2, "What chess rating do I want to reach?", "1500"),
    ("s_garden", [("user", "I planted three rows of garlic in October."),
                  ("assistant", "Garlic planted in autumn is ready to harvest in early summer."),
                  ("user", "The soil in my plot is heavy clay."),
                  ("assistant", "Adding compost and grit will help the clay drain.")],
     0, "When did I plant my garlic?", "October"),
    ("s_trip", [("user", "We are flying to Lisbon on the 14th for my sister's wedding."),
                ("assistant", "Lisbon is lovely; try the custard tarts in Belem."),
                ("user", "The wedding is in a vineyard outside Sintra."),
                ("assistant", "Sintra's palaces are worth an extra day if you can stay.")],
     2, "Where is my sister's wedding?", "a vineyard outside Sintra"),
    ("s_bike", [("user", "My commuter bike has a Brooks leather saddle."),
                ("assistant", "Brooks saddles need proofide a few times a year."),
                ("user", "I ride 12 kilometres to work each way."),
                ("assistant", "That is 24 kilometres a day, a solid amount of exercise.")],
     2, "How far do I ride to work each way?", "12 kilometres"),
    ("s_piano", [("user", "I started piano lessons with a teacher called Mrs Okafor."),
                 ("assistant", "Having a teacher early helps avoid bad habits."),
                 ("user", "She gave me a Clementi sonatina to learn."),
                 ("assistant", "Sonatinas are perfect for building finger independence.")],
     0, "Who is my piano teacher?", "Mrs Okafor"),
    ("s_cat", [("user", "Our cat Miso knocked the orchid off the windowsill again."),
               ("assistant", "Cats love ledges; a heavier pot or a different spot may help."),
               ("user", "Miso is a ginger tabby and she is four years old."),
               ("assistant", "Ginger tabby females are fairly rare, most are male.")],
     2, "How old is my cat Miso?", "four years old"),
    ("s_code", [("user", "I am rewriting our billing service from Perl to Go."),
                ("assistant", "Go's static binaries make deployment much simpler."),
                ("user", "The old service handles about 2,000 invoices a day."),
                ("assistant", "That volume is easy for a single Go process.")],
     0, "What language am I rewriting the billing service in?", "Go"),
    ("s_run", [("user", "I signed up for the Rotterdam half marathon in April."),
               ("assistant", "A twelve-week plan with one long run a week works well."),
               ("user", "My best 10k time is 52 minutes."),
               ("assistant", "That suggests a half marathon of just under two hours.")],
     2, "What is my best 10k time?", "52 minutes"),
    ("s_paint", [("user", "I painted the hallway a dark green called Studio Green."),
                 ("assistant", "Dark greens look great with brass fittings."),
                 ("user", "It took four litres for two coats."),
                 ("assistant", "Two coats is usually right for a deep colour.")],
     0, "What colour did I paint the hallway?", "Studio Green"),
    ("s_book", [("user", "Our book club is reading The Left Hand of Darkness this month."),
                ("assistant", "Le Guin's world of Gethen makes for great discussion."),
                ("user", "I host the meeting at my flat on the last Sunday."),
                ("assistant", "Hosting is a nice chance to try a themed snack.")],
     0, "Which book is my book club reading?", "The Left Hand of Darkness"),
]


def question(k: int, per_question: int = 5, start: dt.date = dt.date(2023, 5, 1)) -> dict:
    """Question ``k``: the pool session ``k`` (answer) plus ``per_question - 1`` others, in a
    haystack order and dates of its own."""
    n = len(POOL)
    picks = [k % n] + [(k * 5 + 3 * j + 1) % n for j in range(1, per_question)]
    picks = list(dict.fromkeys(picks))
    order = sorted(picks, key=lambda i: ((i * 7 + k * 3) % n, i))
    answer_sid, turns, answer_turn, q, a = POOL[k % n]
    ids, dates, sessions = [], [], []
    day = start + dt.timedelta(days=k)
    for j, i in enumerate(order):
        sid, sess, hit, _q, _a = POOL[i]
        when = dt.datetime.combine(day + dt.timedelta(days=2 * j + (k % 3)), dt.time(9 + (k + j) % 10, 15))
        ids.append(sid)
        dates.append(when.strftime("%Y/%m/%d (%a) %H:%M"))
        sessions.append([{"role": r, "content": t, **({"has_answer": True} if i == k % n and m == hit else {})}
                         for m, (r, t) in enumerate(sess)])
    return {"question_id": f"synth{k:03d}", "question_type": "single-session-user", "question": q, "answer": a,
            "question_date": (day + dt.timedelta(days=40)).strftime("%Y/%m/%d (%a) %H:%M"),
            "haystack_session_ids": ids, "haystack_dates": dates, "haystack_sessions": sessions,
            "answer_session_ids": [answer_sid]}


def longmemeval_file(path: Path, n: int, per_question: int = 5) -> Path:
    path.write_text(json.dumps([question(k, per_question) for k in range(n)]), encoding="utf-8")
    return path
