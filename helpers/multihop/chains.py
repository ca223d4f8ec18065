"""Chains of passages: passage A mentions entity B, and B has its own passage in the corpus.

The link is a title match: B's title (without a disambiguation like "(film)") occurs in A's
text, case-sensitively, on word boundaries, longest match first. Titles that are not names
(no capital letter, a bare year, a one-word title shorter than four letters) never link, and a
one-word title does not link at the start of a sentence, where any word is capitalised.
A chain continues from B the same way; every entity in it is distinct (no title contains
another's), so a chain A -> B -> C never doubles back.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from helpers.multihop.facts import Lead, clean_title, distinct, read_lead
from helpers.multihop.kin_place import with_kin_place
from helpers.multihop.more_facts import with_more
from helpers.multihop.names_members import with_names_members
from helpers.multihop.time_place import with_time_place
from helpers.multihop.years import with_years
from helpers.search.local import Passage, split_contents

WORD = re.compile(r"\w+")
MAX_TITLE_WORDS = 8
MIN_SINGLE_WORD = 4
COMMON_IN_CORPUS = 3  # lower-case uses of a one-word name above which it is a common word
COMMON_WORDS = frozenset(
    "january february march april may june july august september october november december "
    "monday tuesday wednesday thursday friday saturday sunday spring summer autumn winter "
    "north south east west god love home time life world king queen prince war peace".split())


@dataclass(frozen=True)
class Mention:
    title: str  # the linked entity's passage title
    start: int  # character offset of the mention in the passage text


def passages_from_rows(rows: Iterable[dict]) -> list[Passage]:
    """Search-R1 corpus rows (``{"id", "contents"}``) as passages."""
    return [Passage(row["id"], *split_contents(row["contents"])) for row in rows]


def linkable(title: str) -> bool:
    """Whether a title reads as a name that running text would spell the same way.

    A one-word name with a disambiguation ("September (2007 film)", "Kiss (band)") is a common
    word that happens to name something; in running text it almost never means that thing.
    """
    name = clean_title(title)
    words = WORD.findall(name)
    if not words or len(words) > MAX_TITLE_WORDS or name.isdigit():
        return False
    if not any(w[:1].isupper() for w in words):
        return False
    if len(words) == 1:
        return name == title and len(name) >= MIN_SINGLE_WORD and name.lower() not in COMMON_WORDS
    return True


class Corpus:
    """Passages by title, the leads (description + facts) of titled entities, and title links."""

    def __init__(self, passages: list[Passage]):
        self.passages = passages
        self.by_id = {p.id: p for p in passages}
        self.by_title: dict[str, list[Passage]] = {}
        for passage in passages:
            self.by_title.setdefault(passage.title, []).append(passage)
        # the entity's profile: its first lead passage (in id order) with a description
        self.leads: dict[str, Lead] = {}
        for passage in sorted(passages, key=lambda p: p.id):
            lead = with_kin_place(with_more(read_lead(passage.id, passage.title, passage.text), passage.text),
                                  passage.text)
            lead = with_years(with_time_place(lead, passage.text))
            lead = with_names_members(lead, passage.text)
            if lead is None:
                continue
            known = self.leads.get(passage.title)
            if known is None or (known.description is None and lead.description is not None):
                self.leads[passage.title] = lead
        # a one-word name that the corpus also writes in lower case is a common word ("Tunnel")
        lower: dict[str, int] = {}
        for passage in passages:
            for word in WORD.findall(passage.text):
                if word.islower():
                    lower[word] = lower.get(word, 0) + 1
        # token tuple of a clean title -> titles that read that way (several when only "(...)" differs)
        self._names: dict[tuple[str, ...], list[str]] = {}
        for title in sorted(self.by_title):
            key = tuple(WORD.findall(clean_title(title)))
            # the key, not the name: "Mother!" matches the word "Mother", which is a common word
            if linkable(title) and (len(key) > 1 or lower.get(key[0].lower(), 0) < COMMON_IN_CORPUS):
                self._names.setdefault(key, []).append(title)
        self._longest = max((len(k) for k in self._names), default=0)

    def mentions(self, passage: Passage) -> list[Mention]:
        """Titled entities the passage names, each once, in text order (not the passage's own)."""
        tokens = [(m.group(), m.start()) for m in WORD.finditer(passage.text)]
        own = clean_title(passage.title)
        seen: set[str] = set()
        out: list[Mention] = []
        i = 0
        while i < len(tokens):
            step = 1
            for n in range(min(self._longest, len(tokens) - i), 0, -1):
                key = tuple(t for t, _ in tokens[i:i + n])
                titles = self._names.get(key)
                if not titles:
                    continue
                start = tokens[i][1]
                if n == 1 and _sentence_start(passage.text, start):
                    break
                step = n
                # an ambiguous name ("Cambridge" and "Cambridge (film)") links only when one reads plainly
                title = key_title(titles)
                if title and title not in seen and distinct(title, own) and fits_context(title, passage.text):
                    seen.add(title)
                    out.append(Mention(title, start))
                break
            i += step
        return out

    def lead(self, title: str) -> Lead | None:
        return self.leads.get(title)

    def texts(self, ids: Iterable[str]) -> list[str]:
        """The passages' texts with their title line, as the checks read a chain."""
        return [self.by_id[i].title + "\n" + self.by_id[i].text for i in ids]


def key_title(titles: list[str]) -> str | None:
    """The title a bare name refers to: the undisambiguated one, or the only one."""
    plain = [t for t in titles if clean_title(t) == t]
    if len(plain) == 1:
        return plain[0]
    return titles[0] if len(titles) == 1 else None


def fits_context(title: str, text: str) -> bool:
    """A disambiguated title links only where the passage shares a word of its disambiguation:
    "New Hampshire (poetry collection)" from a passage that speaks of poetry, not of the state."""
    if clean_title(title) == title:
        return True
    hint = title[len(clean_title(title)):]
    words = [w.lower() for w in WORD.findall(hint) if len(w) >= 4 or w.isdigit()]
    lowered = text.lower()
    return any(re.search(rf"\b{re.escape(w)}", lowered) for w in words)


def _sentence_start(text: str, start: int) -> bool:
    before = text[:start].rstrip(" \"'(")
    return not before or before[-1] in ".!?:"

