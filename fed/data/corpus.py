"""A synthetic labelled corpus the project generates itself, so a default run downloads nothing.

Each record is one short English sentence about one of four topics (the label), written in
one of four styles (the record's group): a product review, a tweet, a news report or a
question. A sentence is a style template whose slots (product, event, actor, place, action,
hashtag) are filled from the label's word lists, except that with probability ``MIX`` one
topic slot of a template with several comes from another topic, so some sentences are
ambiguous and accuracy stays below one. Sentiment words, times and emoji are shared by all topics.

``generate_corpus`` is the users' private data; its splits never share a sentence (see its
docstring). ``generate_public_corpus`` is the server's public labelled data: the same word
lists with a disjoint template set, so no public sentence appears in the private corpus.
"""

from __future__ import annotations

import hashlib

import numpy as np

from ldpfed.fed.data.dataset import TextDataset

LABEL_NAMES = ("sports", "technology", "food", "finance")
STYLE_NAMES = ("review", "tweet", "news", "question")
MIX = 0.15
"""Probability that one topic slot (of several) is filled from a different topic."""

TOPIC_WORDS: dict[str, dict[str, tuple[str, ...]]] = {
    "sports": {
        "product": ("running shoes", "tennis racket", "football boots", "season ticket",
                    "golf clubs", "yoga mat", "cycling helmet", "basketball jersey"),
        "event": ("match", "tournament", "season opener", "cup final", "derby", "marathon",
                  "playoff game", "title fight", "training camp"),
        "actor": ("the coach", "the striker", "our goalkeeper", "the referee", "the team captain",
                  "the rookie", "the quarterback", "the home side", "the sprinter"),
        "place": ("the stadium", "the arena", "the training ground", "the race track",
                  "the tennis court", "the locker room", "the ballpark"),
        "action": ("scored twice in the second half", "won the championship",
                   "lost on penalties", "broke the world record", "signed a new contract",
                   "was injured during the warm-up", "made the playoffs",
                   "got a red card in extra time", "defended the title"),
        "hashtag": ("#gameday", "#football", "#matchday", "#nba", "#worldcup", "#teamspirit"),
    },
    "technology": {
        "product": ("laptop", "smartphone", "wireless earbuds", "smartwatch", "graphics card",
                    "mechanical keyboard", "wifi router", "tablet"),
        "event": ("software update", "app release", "product launch", "security patch",
                  "developer conference", "beta test", "hackathon", "server outage"),
        "actor": ("the engineers", "the startup", "the developers", "the chipmaker",
                  "the IT department", "the software company", "the hackers", "the app maker"),
        "place": ("the data center", "the tech expo", "Silicon Valley", "the server room",
                  "the app store", "the electronics shop", "the coding bootcamp"),
        "action": ("crashed after the latest update", "released a faster processor",
                   "fixed the security bug", "launched a new operating system",
                   "drained the battery overnight", "patched the vulnerability",
                   "shipped the feature early", "leaked the source code",
                   "doubled the storage"),
        "hashtag": ("#tech", "#gadgets", "#coding", "#ai", "#android", "#startup"),
    },
    "food": {
        "product": ("pasta", "sourdough bread", "ramen", "chocolate cake", "espresso",
                    "vegan burger", "cheese platter", "spicy curry", "pizza"),
        "event": ("dinner service", "cooking class", "food festival", "tasting menu", "brunch",
                  "bake sale", "barbecue", "wine tasting"),
        "actor": ("the chef", "the waiter", "the baker", "the sommelier", "the restaurant owner",
                  "my grandmother", "the kitchen staff", "the pastry cook"),
        "place": ("the restaurant", "the bakery", "the kitchen", "the farmers market", "the cafe",
                  "the food truck", "the pizzeria", "the noodle bar"),
        "action": ("burned the garlic", "served the soup cold", "baked fresh croissants",
                   "added too much salt", "opened a new bistro", "ran out of dessert",
                   "seasoned the steak perfectly", "changed the recipe",
                   "grilled the fish with lemon"),
        "hashtag": ("#foodie", "#yummy", "#recipe", "#brunch", "#dinner", "#homecooking"),
    },
    "finance": {
        "product": ("savings account", "credit card", "mortgage", "index fund", "pension plan",
                    "stock portfolio", "personal loan", "budgeting app"),
        "event": ("earnings report", "interest rate decision", "quarterly results",
                  "market rally", "budget review", "tax deadline", "merger", "stock split"),
        "actor": ("the central bank", "the investors", "the analysts", "my accountant",
                  "the bank", "the shareholders", "the hedge fund", "the lender"),
        "place": ("the stock exchange", "Wall Street", "the bank branch", "the trading floor",
                  "the tax office", "the insurance company", "the brokerage"),
        "action": ("raised interest rates", "reported record profits", "cut its dividend",
                   "missed revenue forecasts", "approved the loan", "lost money on the stock",
                   "paid off the debt", "froze the account", "doubled the fees"),
        "hashtag": ("#stocks", "#investing", "#finance", "#money", "#markets", "#crypto"),
    },
}

SHARED_WORDS: dict[str, tuple[str, ...]] = {
    "good": ("great", "amazing", "excellent", "fantastic", "solid", "wonderful"),
    "bad": ("terrible", "disappointing", "awful", "mediocre", "overrated", "frustrating"),
    "time": ("yesterday", "last night", "this morning", "on Monday", "last week",
             "over the weekend", "today", "on Friday", "this afternoon", "two days ago",
             "earlier today"),
    "emoji": (":)", ":(", "!!", "lol", "smh", "ngl", "tbh", "wow", "omg"),
    "person": ("my friend", "my sister", "a colleague", "my neighbor", "my dad", "everyone",
               "my brother", "my boss", "my roommate", "my cousin"),
}

_TEMPLATES: dict[str, dict[str, tuple[str, ...]]] = {
    "private": {
        "review": (
            "I bought the {product} {time} and it was {good}.",
            "{person} warned me about the {product} and it really is {bad}.",
            "Visited {place} for the {event} {time} and it was {good}, would go again.",
            "Three stars: the {event} was {bad} because {actor} {action}.",
            "{person} recommended the {product} and honestly it is {good}.",
            "Five stars for {place}, the {product} there is {good}.",
        ),
        "tweet": (
            "{time} {actor} {action} {emoji} {hashtag}",
            "can't believe {actor} {action} {emoji}",
            "the {event} at {place} was {bad} {emoji} {hashtag}",
            "who else is following the {event}?? {hashtag}",
            "{person} just told me {actor} {action} {emoji}",
            "{good} {event} today {hashtag} {hashtag}",
        ),
        "news": (
            "{actor} {action} {time}, according to a statement released at {place}.",
            "Officials confirmed that {actor} {action} ahead of the {event}.",
            "In a report published {time}, observers noted that {actor} {action}.",
            "The {event} at {place} was postponed after {actor} {action}.",
            "Demand for the {product} rose sharply after {actor} {action}.",
        ),
        "question": (
            "Has {person} tried the {product} from {place}?",
            "Is it true that {actor} {action} {time}?",
            "{person} asked me what to expect at the {event} at {place}?",
            "Where can {person} find the best {product} near {place}?",
            "Why was the {event} so {bad} {time}?",
        ),
    },
    "public": {
        "review": (
            "My honest opinion of the {product}: {good}.",
            "Rating the {event} at {place}: {bad}, mostly because {actor} {action}.",
            "Would not recommend the {product}, quality is {bad}.",
            "Spent the afternoon at {place} and the {event} was {good}.",
        ),
        "tweet": (
            "{hashtag} {actor} {action} and i'm not ok {emoji}",
            "just got back from {place}, {good} {event} {emoji}",
            "why is the {product} so {bad} {emoji} {hashtag}",
            "{emoji} {actor} {action}",
        ),
        "news": (
            "{actor} {action}, sources close to {place} said {time}.",
            "The {event} drew attention after {actor} {action}.",
            "Reports from {place} suggest that {actor} {action}.",
            "Sales of the {product} were described as {bad} by industry observers.",
        ),
        "question": (
            "Does anybody know if {actor} {action}?",
            "How {good} is the {product} really?",
            "Should I go to the {event} at {place} this year?",
            "When did {actor} say the {event} would start?",
        ),
    },
}

_SLOTS = ("product", "event", "actor", "place", "action", "hashtag")
_HELD_OUT_BUCKETS = {"dev": range(0, 1), "test": range(1, 2)}


def _rng(seed: int, tag: str) -> np.random.Generator:
    """A generator for (seed, tag); the tag (e.g. a split) is hashed to a stable integer."""
    tag_int = int.from_bytes(hashlib.sha256(tag.encode("utf-8")).digest()[:8], "little")
    return np.random.default_rng([seed, tag_int])


def _sentence(template: str, topic: str, rng: np.random.Generator) -> str:
    """Fill every slot of ``template``; with probability ``MIX`` one topic slot of a
    template with several is filled from another topic (ambiguous, never mislabelled)."""
    parts = template.split("{")
    slots = [part.split("}", 1)[0] for part in parts[1:]]
    topic_slots = [i for i, slot in enumerate(slots) if slot in _SLOTS]
    swapped = -1
    if len(topic_slots) >= 2 and rng.random() < MIX:
        swapped = topic_slots[rng.integers(len(topic_slots))]
    out = [parts[0]]
    for i, part in enumerate(parts[1:]):
        slot, rest = part.split("}", 1)
        if slot not in _SLOTS:
            words = SHARED_WORDS[slot]
        elif i == swapped:
            others = [name for name in LABEL_NAMES if name != topic]
            words = TOPIC_WORDS[others[rng.integers(len(others))]][slot]
        else:
            words = TOPIC_WORDS[topic][slot]
        out.append(words[rng.integers(len(words))])
        out.append(rest)
    text = "".join(out)
    return text[0].upper() + text[1:]


def _bucket(text: str) -> int:
    """Which tenth of the sentence space ``text`` falls in (stable across runs)."""
    return hashlib.sha256(text.encode("utf-8")).digest()[0] % 10


def _generate(
    num_records: int, rng: np.random.Generator, templates: str, name: str, buckets: range
) -> TextDataset:
    """Draw records until ``num_records`` sentences fall in ``buckets``."""
    if num_records < 1:
        raise ValueError(f"num_records must be at least 1, got {num_records}")
    texts: list[str] = []
    labels: list[int] = []
    styles: list[int] = []
    while len(texts) < num_records:
        label = int(rng.integers(len(LABEL_NAMES)))
        style = int(rng.integers(len(STYLE_NAMES)))
        options = _TEMPLATES[templates][STYLE_NAMES[style]]
        text = _sentence(options[rng.integers(len(options))], LABEL_NAMES[label], rng)
        if _bucket(text) in buckets:
            texts.append(text)
            labels.append(label)
            styles.append(style)
    return TextDataset(
        name=name,
        texts=tuple(texts),
        texts2=None,
        labels=np.array(labels, dtype=np.int64),
        label_names=LABEL_NAMES,
        groups=np.array(styles, dtype=np.int64),
        group_names=STYLE_NAMES,
    )


def generate_corpus(num_records: int, seed: int, split: str) -> TextDataset:
    """The users' private corpus.

    Parameters
    ----------
    num_records:
        Number of sentences.
    seed:
        Corpus seed; each split draws from its own stream derived from (seed, split).
    split:
        "dev" and "test" each keep only sentences whose SHA-256 falls in their own tenth
        of the sentence space, every other split name (e.g. "train") the remaining
        eight tenths, so the splits never share a sentence. Sentences may repeat within
        a split, as in real data.

    Returns
    -------
    TextDataset
        Labels are topics (``LABEL_NAMES``); ``groups`` holds each record's writing style
        (``STYLE_NAMES``), so a partition can give users different styles.
    """
    buckets = _HELD_OUT_BUCKETS.get(split, range(2, 10))
    return _generate(num_records, _rng(seed, f"private/{split}"), "private", f"generated/{split}", buckets)


def generate_public_corpus(num_records: int, seed: int = 0) -> TextDataset:
    """The server's public labelled corpus: same topics and vocabulary as
    ``generate_corpus``, disjoint templates, so its sentences never occur in the private
    corpus. Used for projection fitting, the public-only baseline and BiLSTM pre-training.
    """
    return _generate(num_records, _rng(seed, "public"), "public", "generated-public", range(10))
