#!/usr/bin/python3
"""GSM8K-style grade-school word problems for the tiny sample models.

Every problem is 2-4 steps of + - * / on small integers.  Answers use the GSM8K
format: one line per step with a calculator annotation `a*b=<<a*b=c>>c`, and a
final line `#### N`.

Train and test are disjoint in three ways:
  * different RNG seeds (SEED_TRAIN / SEED_FEWSHOT / SEED_CALIB vs SEED_TEST);
  * every schema has question templates reserved for the test split: new
    combinations of the schema's train clauses and question sentences (so a
    tiny model can still read them), and a few whole schemas with new stories
    and words (TEST_ONLY, 10% of the test split) never appear in training;
  * test_samples.py checks that no test question and no test question template
    (numbers, names, items, pronouns masked) occurs in the regenerated train split.

Usage:
  gen_gsm.py --split train|test|fewshot|calib|heldout --n N [--level small|full] [--out FILE]
"""
import argparse
import json
import random
import sys

SEED_TRAIN, SEED_TEST, SEED_FEWSHOT, SEED_CALIB, SEED_HELDOUT = 1001, 2002, 3003, 4004, 5005

NAMES = [("Tom", "he", "his"), ("Anna", "she", "her"), ("Liam", "he", "his"), ("Mia", "she", "her"),
         ("Noah", "he", "his"), ("Emma", "she", "her"), ("Ben", "he", "his"), ("Sara", "she", "her"),
         ("Omar", "he", "his"), ("Lucy", "she", "her"), ("Jack", "he", "his"), ("Nina", "she", "her"),
         ("Leo", "he", "his"), ("Ella", "she", "her"), ("Sam", "he", "his"), ("Zoe", "she", "her"),
         ("Max", "he", "his"), ("Lily", "she", "her"), ("Ravi", "he", "his"), ("Grace", "she", "her"),
         ("Paul", "he", "his"), ("Rosa", "she", "her"), ("Ivan", "he", "his"), ("Amy", "she", "her"),
         ("Carl", "he", "his"), ("Julia", "she", "her"), ("Hugo", "he", "his"), ("Maya", "she", "her")]
ITEMS = ["pens", "apples", "stickers", "marbles", "cookies", "books", "cards", "shells", "stamps",
         "pencils", "oranges", "balloons", "candies", "toy cars", "buttons", "beads", "eggs", "muffins",
         "crayons", "rocks", "flowers", "coins", "blocks", "cupcakes"]
CONTAINERS = ["boxes", "bags", "packs", "jars", "baskets", "crates", "trays", "cans"]
FOODS = ["cookies", "muffins", "cupcakes", "rolls", "pies", "pancakes", "brownies", "tarts"]
GOODS = ["notebooks", "pens", "toys", "shirts", "hats", "books", "cups", "plates", "kites", "balls"]
PLACES = ["the park", "school", "the lake", "the library", "the farm", "the market", "the zoo"]


class P:
    """Accumulates one problem: the question text and the answer lines."""

    def __init__(self):
        self.lines = []

    def step(self, text, expr, val):
        """text holds '{}' where the annotated calculation goes."""
        assert float(val) == eval(expr.replace("x", "*")), (expr, val)
        self.lines.append(text.replace("{}", "%s=<<%s=%d>>%d" % (expr, expr, val, val)))
        return val

    def answer(self, final):
        return "\n".join(self.lines + ["#### %d" % final])


_LEVEL = "full"


def R(r, lo, hi, slo, shi):
    """randint over [lo, hi], or [slo, shi] at the "small" number level."""
    return r.randint(slo, shi) if _LEVEL == "small" else r.randint(lo, hi)


def who(r):
    return r.choice(NAMES)


def two_people(r):
    a = who(r)
    b = who(r)
    while b[0] == a[0]:
        b = who(r)
    return a, b


def pick(r, split, train, test):
    return r.choice(test if split == "test" else train)


# Each schema: f(r, split) -> (question, answer).  Phrasing lists are (train, test).

def s_groups_minus(r, split):
    n, pr, po = who(r)
    it, box = r.choice(ITEMS), r.choice(CONTAINERS)
    a, b = R(r, 2, 9, 2, 5), R(r, 2, 12, 2, 6)
    c = r.randint(1, a * b - 1)
    q = pick(r, split, [
        f"{n} has {a} {box} of {it}. Each one holds {b} {it}. {pr.capitalize()} gives away {c} {it}. How many {it} does {n} have left?",
        f"{n} buys {a} {box} with {b} {it} in each. Then {pr} gives {c} {it} to a friend. How many {it} does {pr} have now?",
        f"There are {b} {it} in each of {n}'s {a} {box}. {n} loses {c} of them. How many {it} are left?",
    ], [
        f"{n} buys {a} {box} with {b} {it} in each. {pr.capitalize()} loses {c} of them. How many {it} are left?",
        f"{n} has {a} {box} of {it}. Each one holds {b} {it}. Then {pr} gives {c} {it} to a friend. How many {it} does {pr} have now?",
    ])
    p = P()
    t = p.step(f"{n} has {{}} {it}.", f"{a}*{b}", a * b)
    left = p.step(f"After giving away {c}, {pr} has {{}} {it} left.", f"{t}-{c}", t - c)
    return q, p.answer(left)


def s_two_groups(r, split):
    n, pr, po = who(r)
    it = r.choice(ITEMS)
    b1, b2 = r.sample(CONTAINERS, 2)
    a, b, c, d = R(r, 2, 6, 2, 4), R(r, 2, 10, 2, 5), R(r, 2, 6, 2, 4), R(r, 2, 10, 2, 5)
    q = pick(r, split, [
        f"{n} has {a} {b1} of {it} with {b} in each and {c} {b2} with {d} in each. How many {it} does {n} have in all?",
        f"{n} buys {a} {b1} of {b} {it} and {c} {b2} of {d} {it}. How many {it} did {pr} buy?",
    ], [
        f"{n} has {a} {b1} of {b} {it} and {c} {b2} of {d} {it}. How many {it} does {n} have in all?",
    ])
    p = P()
    x = p.step(f"The {b1} hold {{}} {it}.", f"{a}*{b}", a * b)
    y = p.step(f"The {b2} hold {{}} {it}.", f"{c}*{d}", c * d)
    t = p.step(f"In all {n} has {{}} {it}.", f"{x}+{y}", x + y)
    return q, p.answer(t)


def s_change(r, split):
    n, pr, po = who(r)
    g = r.choice(GOODS)
    a, b = R(r, 2, 8, 2, 5), R(r, 2, 12, 2, 6)
    cost = a * b
    bills = (20, 50) if _LEVEL == "small" else (20, 50, 100, 200)
    paid = r.choice([v for v in bills if v > cost] or [cost + 10])
    q = pick(r, split, [
        f"{n} buys {a} {g} that cost ${b} each. {pr.capitalize()} pays with a ${paid} bill. How much change does {pr} get?",
        f"Each of the {g} costs ${b}. {n} buys {a} of them and pays ${paid}. How much change should {n} get back?",
    ], [
        f"{n} buys {a} {g} that cost ${b} each and pays ${paid}. How much change should {n} get back?",
    ])
    p = P()
    c = p.step(f"The {g} cost {{}} dollars.", f"{a}*{b}", cost)
    ch = p.step(f"{n} gets {{}} dollars in change.", f"{paid}-{c}", paid - c)
    return q, p.answer(ch)


def s_earn_spend(r, split):
    n, pr, po = who(r)
    a, b = R(r, 3, 15, 3, 8), R(r, 2, 8, 2, 4)
    c = r.randint(1, a * b - 1)
    q = pick(r, split, [
        f"{n} earns ${a} per hour. {pr.capitalize()} works for {b} hours and then spends ${c} on lunch. How much money does {pr} have left?",
        f"{n} makes ${a} an hour babysitting. After working {b} hours, {pr} buys a game for ${c}. How many dollars does {pr} have left?",
    ], [
        f"{n} makes ${a} an hour. {pr.capitalize()} works for {b} hours and then buys a game for ${c}. How much money does {pr} have left?",
    ])
    p = P()
    e = p.step(f"{n} earns {{}} dollars.", f"{a}*{b}", a * b)
    left = p.step(f"After spending {c}, {pr} has {{}} dollars left.", f"{e}-{c}", e - c)
    return q, p.answer(left)


def s_share(r, split):
    n, pr, po = who(r)
    it = r.choice(ITEMS)
    k = R(r, 2, 6, 2, 5)
    total = k * R(r, 2, 12, 2, 6)
    a = r.randint(1, total - 1)
    b = total - a
    q = pick(r, split, [
        f"{n} has {a} {it}. {pr.capitalize()} buys {b} more and shares them equally among {k} friends. How many {it} does each friend get?",
        f"{n} collects {a} {it} and finds {b} more. {pr.capitalize()} splits them equally into {k} groups. How many {it} are in each group?",
    ], [
        f"{n} collects {a} {it} and buys {b} more. {pr.capitalize()} shares them equally among {k} friends. How many {it} does each friend get?",
    ])
    p = P()
    t = p.step(f"{n} has {{}} {it}.", f"{a}+{b}", total)
    e = p.step(f"Each friend gets {{}} {it}.", f"{t}/{k}", total // k)
    return q, p.answer(e)


def s_pages(r, split):
    n, pr, po = who(r)
    a, b = R(r, 3, 15, 3, 8), R(r, 2, 7, 2, 4)
    total = a * b + R(r, 1, 60, 1, 20)
    q = pick(r, split, [
        f"A book has {total} pages. {n} reads {a} pages a day for {b} days. How many pages are left to read?",
        f"{n}'s book is {total} pages long. {pr.capitalize()} reads {a} pages every day. How many pages are left after {b} days?",
    ], [
        f"{n}'s book has {total} pages. {pr.capitalize()} reads {a} pages a day for {b} days. How many pages are left to read?",
    ])
    p = P()
    rd = p.step(f"{n} reads {{}} pages.", f"{a}*{b}", a * b)
    left = p.step(f"There are {{}} pages left.", f"{total}-{rd}", total - rd)
    return q, p.answer(left)


def s_give_each(r, split):
    n, pr, po = who(r)
    it, box = r.choice(ITEMS), r.choice(CONTAINERS)
    a, b = R(r, 3, 9, 2, 5), R(r, 4, 12, 3, 6)
    c, d = R(r, 2, 5, 2, 3), R(r, 2, 5, 2, 3)
    while c * d >= a * b:
        c, d = r.randint(1, 3), r.randint(2, 4)
    q = pick(r, split, [
        f"{n} has {a} {box} of {it} with {b} {it} in each. {pr.capitalize()} gives {c} {it} to each of {d} friends. How many {it} does {n} have left?",
        f"{n} buys {a} {box} of {b} {it}. {pr.capitalize()} gives each of {po} {d} friends {c} {it}. How many {it} are left?",
    ], [
        f"{n} buys {a} {box} of {b} {it}. {pr.capitalize()} gives {c} {it} to each of {d} friends. How many {it} are left?",
    ])
    p = P()
    t = p.step(f"{n} has {{}} {it}.", f"{a}*{b}", a * b)
    g = p.step(f"{pr.capitalize()} gives away {{}} {it}.", f"{c}*{d}", c * d)
    left = p.step(f"{n} has {{}} {it} left.", f"{t}-{g}", t - g)
    return q, p.answer(left)


def s_bake_sell(r, split):
    n, pr, po = who(r)
    f = r.choice(FOODS)
    a, b = R(r, 2, 5, 2, 4), R(r, 4, 12, 2, 6)
    c = r.randint(1, min(8, a * b - 1))
    d = R(r, 2, 5, 2, 3)
    q = pick(r, split, [
        f"{n} bakes {a} trays of {f} with {b} {f} on each tray. {pr.capitalize()} eats {c} of them and sells the rest for ${d} each. How much money does {pr} make?",
        f"{n} makes {a} batches of {b} {f}. {pr.capitalize()} keeps {c} {f} and sells the others at ${d} each. How many dollars does {n} earn?",
    ], [
        f"{n} makes {a} batches of {b} {f}. {pr.capitalize()} eats {c} of them and sells the rest for ${d} each. How much money does {pr} make?",
    ])
    p = P()
    t = p.step(f"{n} bakes {{}} {f}.", f"{a}*{b}", a * b)
    s = p.step(f"{pr.capitalize()} sells {{}} {f}.", f"{t}-{c}", t - c)
    m = p.step(f"{pr.capitalize()} makes {{}} dollars.", f"{s}*{d}", s * d)
    return q, p.answer(m)


def s_times_as_many(r, split):
    (n1, p1, _), (n2, p2, _) = two_people(r)
    it = r.choice(ITEMS)
    a, k = R(r, 2, 15, 2, 10), R(r, 2, 5, 2, 4)
    q = pick(r, split, [
        f"{n1} has {a} {it}. {n2} has {k} times as many {it} as {n1}. How many {it} do they have together?",
        f"{n2} has {k} times as many {it} as {n1}. {n1} has {a} {it}. How many {it} do the two of them have in total?",
    ], [
        f"{n1} has {a} {it}. {n2} has {k} times as many {it} as {n1}. How many {it} do the two of them have in total?",
    ])
    p = P()
    b = p.step(f"{n2} has {{}} {it}.", f"{a}*{k}", a * k)
    t = p.step(f"Together they have {{}} {it}.", f"{a}+{b}", a + b)
    return q, p.answer(t)


def s_remove_pack(r, split):
    n, pr, po = who(r)
    it, box = r.choice(ITEMS), r.choice(CONTAINERS)
    k = R(r, 2, 8, 2, 5)
    good = k * R(r, 2, 10, 2, 6)
    c = R(r, 1, 15, 1, 9)
    total = good + c
    q = pick(r, split, [
        f"{n} has {total} {it}. {c} of them are broken. {pr.capitalize()} puts the rest into {box} of {k}. How many {box} does {pr} fill?",
        f"{n} picks {total} {it} but throws away {c} bad ones. {pr.capitalize()} packs the rest in {box} that hold {k} each. How many {box} does {pr} need?",
    ], [
        f"{n} picks {total} {it} but throws away {c} bad ones. {pr.capitalize()} puts the rest into {box} of {k}. How many {box} does {pr} fill?",
    ])
    p = P()
    g = p.step(f"{n} has {{}} good {it}.", f"{total}-{c}", good)
    b = p.step(f"{pr.capitalize()} fills {{}} {box}.", f"{g}/{k}", good // k)
    return q, p.answer(b)


def s_buy_two_kinds(r, split):
    n, pr, po = who(r)
    g1, g2 = r.sample(GOODS, 2)
    a, b, c, d = R(r, 2, 6, 2, 4), R(r, 2, 10, 2, 6), R(r, 2, 6, 2, 4), R(r, 1, 9, 1, 6)
    q = pick(r, split, [
        f"{n} buys {a} {g1} for ${b} each and {c} {g2} for ${d} each. How much does {pr} spend in all?",
        f"{g1.capitalize()} cost ${b} each and {g2} cost ${d} each. {n} buys {a} {g1} and {c} {g2}. How many dollars does {n} spend?",
    ], [
        f"{n} buys {a} {g1} for ${b} each and {c} {g2} for ${d} each. How many dollars does {n} spend?",
    ])
    p = P()
    x = p.step(f"The {g1} cost {{}} dollars.", f"{a}*{b}", a * b)
    y = p.step(f"The {g2} cost {{}} dollars.", f"{c}*{d}", c * d)
    t = p.step(f"{n} spends {{}} dollars.", f"{x}+{y}", x + y)
    return q, p.answer(t)


def s_class_split(r, split):
    n, pr, po = who(r)
    g = R(r, 2, 5, 2, 4)
    k = R(r, 2, 6, 2, 5)
    per = R(r, 2, 9, 2, 5)
    a = g * k
    it = r.choice(ITEMS)
    q = pick(r, split, [
        f"A class has {a} students. The teacher puts them into groups of {k}. Each group gets {per} {it}. How many {it} does the teacher need?",
        f"There are {a} kids at a party. They sit at tables of {k}. Each table gets {per} {it}. How many {it} are needed?",
    ], [
        f"A class has {a} students. They sit at tables of {k}. Each table gets {per} {it}. How many {it} are needed?",
    ])
    p = P()
    t = p.step(f"There are {{}} groups.", f"{a}/{k}", g)
    need = p.step(f"The groups need {{}} {it}.", f"{t}*{per}", t * per)
    return q, p.answer(need)


def s_savings_4step(r, split):
    n, pr, po = who(r)
    a, b = R(r, 2, 10, 2, 6), R(r, 2, 6, 2, 4)
    c, d = R(r, 2, 10, 2, 6), R(r, 2, 4, 2, 3)
    e = r.randint(1, a * b + c * d - 1)
    q = pick(r, split, [
        f"{n} saves ${a} a day for {b} days and ${c} a day for {d} more days. Then {pr} spends ${e} on a toy. How much money does {pr} have left?",
    ], [
        f"{n} saves ${a} a day for {b} days and ${c} a day for {d} more days. Then {pr} buys a game for ${e}. How many dollars does {pr} have left?",
    ])
    p = P()
    x = p.step(f"First {pr} saves {{}} dollars.", f"{a}*{b}", a * b)
    y = p.step(f"Then {pr} saves {{}} dollars.", f"{c}*{d}", c * d)
    t = p.step(f"{pr.capitalize()} saves {{}} dollars in all.", f"{x}+{y}", x + y)
    left = p.step(f"{pr.capitalize()} has {{}} dollars left.", f"{t}-{e}", t - e)
    return q, p.answer(left)


# Held-out schemas: same arithmetic shapes as train schemas, new stories.
def s_speed(r, split):
    n, pr, po = who(r)
    a, b = R(r, 3, 12, 2, 6) * 5, R(r, 2, 4, 2, 3)
    c = R(r, 2, 30, 2, 15)
    q = r.choice([
        f"{n} drives {a} miles per hour for {b} hours and then {c} more miles. How many miles does {pr} drive in all?",
        f"A train goes {a} miles each hour for {b} hours, then travels {c} more miles. How far does the train go?",
    ])
    p = P()
    d = p.step(f"{n} drives {{}} miles first.", f"{a}*{b}", a * b)
    t = p.step(f"In all {pr} drives {{}} miles.", f"{d}+{c}", d + c)
    return q, p.answer(t)


def s_practice(r, split):
    n, pr, po = who(r)
    a, b = R(r, 10, 30, 5, 15), R(r, 2, 6, 2, 4)
    c = R(r, 5, 40, 2, 15)
    q = r.choice([
        f"{n} practices piano for {a} minutes a day for {b} days. On Sunday {pr} practices {c} more minutes. How many minutes does {pr} practice in all?",
        f"{n} runs for {a} minutes each day for {b} days, plus {c} extra minutes on the weekend. How many minutes does {n} run in total?",
    ])
    p = P()
    x = p.step(f"{n} practices {{}} minutes on weekdays.", f"{a}*{b}", a * b)
    t = p.step(f"In all {pr} practices {{}} minutes.", f"{x}+{c}", x + c)
    return q, p.answer(t)


def s_tickets(r, split):
    (n1, p1, _), (n2, p2, _) = two_people(r)
    a, b = R(r, 3, 12, 2, 6), R(r, 2, 6, 2, 4)
    k = R(r, 2, 4, 2, 3)
    q = r.choice([
        f"Tickets to {r.choice(PLACES)} cost ${a} each. {n1} buys {b} tickets. {n2} spends {k} times as much as {n1}. How much do they spend together?",
    ])
    p = P()
    x = p.step(f"{n1} spends {{}} dollars.", f"{a}*{b}", a * b)
    y = p.step(f"{n2} spends {{}} dollars.", f"{x}*{k}", x * k)
    t = p.step(f"Together they spend {{}} dollars.", f"{x}+{y}", x + y)
    return q, p.answer(t)


TRAIN_SCHEMAS = [s_groups_minus, s_two_groups, s_change, s_earn_spend, s_share, s_pages, s_give_each,
                 s_bake_sell, s_times_as_many, s_remove_pack, s_buy_two_kinds, s_class_split, s_savings_4step]
TEST_ONLY = [s_speed, s_practice, s_tickets]
TEST_ONLY_FRAC = 0.1   # share of test problems drawn from TEST_ONLY schemas


def generate(split, n, seed=None, level="full"):
    """Deterministic list of n {"question","answer"} dicts for a split.

    level "full": the original operand ranges (products up to ~100, answers up to a
    few hundred); "small": narrower ranges (products up to 30, add/sub operands
    mostly below 50) that a tiny model can learn the arithmetic of."""
    global _LEVEL
    if seed is None:
        seed = {"train": SEED_TRAIN, "test": SEED_TEST, "fewshot": SEED_FEWSHOT,
                "calib": SEED_CALIB, "heldout": SEED_HELDOUT}[split]
    r = random.Random(seed)
    phr = "test" if split in ("test", "heldout") else "train"
    out, seen = [], set()
    old, _LEVEL = _LEVEL, level
    try:
        while len(out) < n:
            if phr == "test" and r.random() < TEST_ONLY_FRAC:
                f = r.choice(TEST_ONLY)
            else:
                f = r.choice(TRAIN_SCHEMAS)
            q, a = f(r, phr)
            if q in seen:
                continue
            seen.add(q)
            out.append({"question": q, "answer": a})
    finally:
        _LEVEL = old
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--split", required=True, choices=["train", "test", "fewshot", "calib", "heldout"])
    ap.add_argument("--n", type=int, required=True)
    ap.add_argument("--seed", type=int)
    ap.add_argument("--level", choices=["full", "small"], default="small")
    ap.add_argument("--out")
    a = ap.parse_args()
    rows = generate(a.split, a.n, a.seed, a.level)
    f = open(a.out, "w", encoding="utf-8") if a.out else sys.stdout
    for row in rows:
        f.write(json.dumps(row, ensure_ascii=False) + "\n")
    if a.out:
        f.close()


if __name__ == "__main__":
    main()
