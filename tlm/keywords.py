"""RAKE-style keyword queries, so a long task input becomes a short BM25 query that keeps its rare content words.

Rapid Automatic Keyword Extraction (Rose et al., 2010): candidate phrases are the runs of words between stopwords
and punctuation; a word scores degree/frequency (how much it co-occurs inside phrases over how often it occurs),
and a phrase scores the sum of its words' scores. Long phrases of specific words win; lone common words lose.
"""

from __future__ import annotations

import re
from collections import defaultdict

# A small English stopword list (function words, auxiliaries, common adverbs); enough to cut phrase boundaries.
STOPWORDS = frozenset(
    """
    a about above after again against all also am an and any are as at be because been before being below between
    both but by can could did do does doing down during each either else ever every few for from further had has
    have having he her here hers herself him himself his how however i if in into is it its itself just least less
    let like may me might more most much must my myself neither no nor not now of off on once one only or other ought
    our ours ourselves out over own per quite rather said same say says shall she should since so some such than
    that the their theirs them themselves then there these they this those though through thus to too under until
    up upon us very via was we were what when where whether which while who whom whose why will with within without
    would yet you your yours yourself yourselves
    """.split()
)

_WORD = re.compile(r"[a-z0-9][a-z0-9'\-]*")
_SPLIT = re.compile(r"[^\w\s'\-]+")  # punctuation ends a candidate phrase


def candidate_phrases(text: str, stopwords: frozenset[str] = STOPWORDS) -> list[tuple[str, ...]]:
    """Runs of non-stopwords inside each punctuation-delimited chunk, lowercased."""
    phrases: list[tuple[str, ...]] = []
    for chunk in _SPLIT.split(text.lower()):
        current: list[str] = []
        for word in _WORD.findall(chunk):
            if word in stopwords or word.isdigit():
                if current:
                    phrases.append(tuple(current))
                current = []
            else:
                current.append(word)
        if current:
            phrases.append(tuple(current))
    return phrases


def rake_keywords(text: str, top_n: int | None = None, stopwords: frozenset[str] = STOPWORDS) -> list[str]:
    """Phrases ranked by RAKE score (ties keep first-occurrence order); each phrase appears once."""
    phrases = candidate_phrases(text, stopwords)
    frequency: dict[str, int] = defaultdict(int)
    degree: dict[str, int] = defaultdict(int)
    for phrase in phrases:
        for word in phrase:
            frequency[word] += 1
            degree[word] += len(phrase)  # co-occurrences inside the phrase, counting the word itself
    scored: dict[tuple[str, ...], float] = {}
    for phrase in phrases:
        if phrase not in scored:
            scored[phrase] = sum(degree[w] / frequency[w] for w in phrase)
    order = sorted(scored, key=lambda p: -scored[p])  # sorted() is stable: ties keep text order
    ranked = [" ".join(p) for p in order]
    return ranked if top_n is None else ranked[:top_n]


def keyword_query(text: str, max_words: int) -> str:
    """The best RAKE phrases, whole, until `max_words` words are used (the first phrase is always kept)."""
    words: list[str] = []
    for phrase in rake_keywords(text):
        parts = phrase.split()
        if words and len(words) + len(parts) > max_words:
            continue
        words.extend(parts)
        if len(words) >= max_words:
            break
    return " ".join(words)
