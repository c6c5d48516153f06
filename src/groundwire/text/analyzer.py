"""The one analyzer shared by index and query: text in, search terms out.

Pipeline: Unicode NFKC → case folding → optional diacritic folding → words (runs of
letters, digits and combining marks) → CJK runs become overlapping bigrams → stop
words dropped → Snowball stemming. ASCII text takes a fast path with the same result.
"""

from __future__ import annotations

import functools
import re
import sys
import threading
import unicodedata
from collections.abc import Callable

import Stemmer

from groundwire.config import STEM_CACHE_SIZE, AnalyzerConfig
from groundwire.errors import ConfigError
from groundwire.text.stopwords import resolve_stopwords

__all__ = ["Analyzer"]

# Han, Hiragana, Katakana (incl. phonetic extensions), Hangul syllables and jamo.
_CJK = (
    "\u1100-\u11ff\u3040-\u309f\u30a0-\u30ff\u3130-\u318f\u31f0-\u31ff\u3400-\u4dbf"
    "\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\U00020000-\U0003134f"
)
# Every byte to itself if an ASCII letter or digit (lower-cased), else to a space: ASCII
# text translated through it splits into exactly the words the regular expression
# [a-z0-9]+ finds in its lower case, about three times faster than the expression.
_ASCII_WORDS = bytes(
    ord(chr(byte).lower()) if byte < 128 and chr(byte).isalnum() else ord(" ")
    for byte in range(256)
)
_DIGIT = re.compile("[0-9]")
_CJK_CHAR = re.compile(f"[{_CJK}]")
_POSSESSIVE = re.compile("(?<=[^\\W_])['\u2019]s\\b")
_HYPHENATED = re.compile(r"[^\W_]+(?:-[^\W_]+)+")


@functools.cache
def _unicode_word() -> re.Pattern[str]:
    """Words: runs of letters/digits or combining marks; CJK runs matched separately.

    Built on first non-ASCII use: scanning for combining marks takes ~0.2 s once.
    """
    category = unicodedata.category
    ranges: list[str] = []
    start = prev = -2
    for cp in range(sys.maxunicode + 1):
        if category(chr(cp))[0] == "M":
            if cp != prev + 1:
                if start >= 0:
                    ranges.append(_range(start, prev))
                start = cp
            prev = cp
    if start >= 0:
        ranges.append(_range(start, prev))
    marks = "".join(ranges)
    return re.compile(f"([{_CJK}]+)|((?:[^\\W_{_CJK}]|[{marks}])+)")


def _range(first: int, last: int) -> str:
    return (
        re.escape(chr(first))
        if first == last
        else f"{re.escape(chr(first))}-{re.escape(chr(last))}"
    )


def _fold_diacritics(text: str) -> str:
    decomposed = unicodedata.normalize("NFD", text)
    stripped = "".join(ch for ch in decomposed if not unicodedata.combining(ch))
    return unicodedata.normalize("NFC", stripped)


def _bigrams(run: str) -> list[str]:
    if len(run) == 1:
        return [run]
    return [run[i : i + 2] for i in range(len(run) - 1)]


class Analyzer:
    """Turns text into normalized search terms; identical for indexing and querying.

    Thread-safe. Stems are cached per analyzer (bounded), so repeated words cost one
    dictionary lookup.
    """

    __slots__ = ("_cache", "_lock", "_stem", "_stopwords", "config")

    def __init__(self, config: AnalyzerConfig | None = None) -> None:
        self.config = config if config is not None else AnalyzerConfig()
        words = resolve_stopwords(self.config.stopwords, self.config.language)
        # Stop words are matched after normalization, so normalize the list the same way.
        self._stopwords = frozenset(self.normalize(word) for word in words)
        self._stem: Callable[[list[str]], list[str]] | None = None
        if self.config.stem:
            try:
                stemmer = Stemmer.Stemmer(self.config.language)
            except KeyError as exc:
                algorithms = ", ".join(sorted(Stemmer.algorithms()))
                raise ConfigError(
                    f"language={self.config.language!r} has no Snowball stemmer; "
                    f"choose one of: {algorithms} (or set stem=False)"
                ) from exc
            self._stem = stemmer.stemWords
        self._cache: dict[str, str] = {}
        self._lock = threading.Lock()

    # -- normalization --------------------------------------------------------------------
    def normalize(self, text: str) -> str:
        """NFKC, case folding and (if configured) diacritic folding; idempotent."""
        if text.isascii():
            return text.lower()
        # Case folding can leave text that NFKC changes again (and vice versa); two
        # rounds reach the fixed point for every assigned code point.
        for _ in range(2):
            text = unicodedata.normalize("NFKC", text).casefold()
        text = unicodedata.normalize("NFKC", text)
        if self.config.fold_diacritics:
            text = _fold_diacritics(text)
        return text

    def words(self, text: str) -> list[str]:
        """Normalized words, CJK runs as overlapping bigrams; no stop words or stems yet."""
        config = self.config
        normalized = self.normalize(text)
        if config.strip_possessives and ("'" in normalized or "\u2019" in normalized):
            normalized = _POSSESSIVE.sub("", normalized)
        if normalized.isascii():
            out: list[str] = normalized.encode().translate(_ASCII_WORDS).decode().split()
        else:
            out = []
            for cjk, word in _unicode_word().findall(normalized):
                if cjk:
                    out.extend(_bigrams(cjk) if config.cjk_bigrams else [cjk])
                else:
                    out.append(word)
        if config.join_hyphenated and "-" in normalized:
            out.extend(match.replace("-", "") for match in _HYPHENATED.findall(normalized))
        if not config.keep_numbers:
            out = [word for word in out if not word.isdigit()]
        return out

    def joined_words(self, texts: list[str]) -> tuple[bytes, list[int]]:
        """The words of each text (as :meth:`words`) in UTF-8, each followed by a space,
        and where each text's words end: ``buf[ends[i-1]:ends[i]].decode().split()`` is
        ``words(texts[i])``.

        Cheaper than :meth:`words` text by text: consecutive ASCII texts (the common
        case) are split in one pass, their possessives and hyphenated joins applied to
        each text first, exactly as :meth:`words` applies them.
        """
        config = self.config
        chunks: list[bytes] = []
        ends: list[int] = []
        run: list[str] = []
        at = 0
        for text in texts:
            if text.isascii() and (config.keep_numbers or not _DIGIT.search(text)):
                text = text.lower()
                if config.strip_possessives and "'" in text:
                    text = _POSSESSIVE.sub("", text)
                if config.join_hyphenated and "-" in text:
                    # words() appends the joined forms after the text's own words.
                    joined = (match.replace("-", "") for match in _HYPHENATED.findall(text))
                    text = " ".join((text, *joined))
                run.append(text)
                at += len(text) + 1
                ends.append(at)
                continue
            if run:  # ASCII: translated, every byte but a letter or digit becomes a space
                chunks.append((" ".join(run) + " ").encode().translate(_ASCII_WORDS))
                run = []
            chunk = "".join(word + " " for word in self.words(text)).encode()
            chunks.append(chunk)
            at += len(chunk)
            ends.append(at)
        if run:
            chunks.append((" ".join(run) + " ").encode().translate(_ASCII_WORDS))
        return b"".join(chunks), ends

    # -- terms ------------------------------------------------------------------------------
    def tokens(self, text: str) -> list[str]:
        """The search terms of ``text``: normalized, stop words removed, stemmed."""
        return self.terms(self.words(text))

    def terms(self, words: list[str]) -> list[str]:
        """Map already-normalized words to terms, dropping stop words."""
        cache = self._cache
        found = list(map(cache.get, words))  # a stop word maps to "", an unseen word to None
        if None in found:
            self._learn([word for word, term in zip(words, found, strict=True) if term is None])
            # Re-read; a word evicted meanwhile by another thread is analyzed on the spot.
            found = [cache[w] if w in cache else self._analyze([w])[0] for w in words]
        return [term for term in found if term]

    def analyze_words(self, words: list[str]) -> list[str]:
        """The term of each normalized word, aligned with ``words`` ("" for a stop word)."""
        return self._analyze(words)

    def phrase(self, text: str) -> str:
        """The key of a phrase for exact/alias lookup: its terms joined by spaces."""
        return " ".join(self.tokens(text))

    def _analyze(self, words: list[str]) -> list[str]:
        """Terms of words; a stop word becomes "" (never a term)."""
        stop = self._stopwords
        kept = [word for word in words if word not in stop]
        stems = self._stem(kept) if self._stem is not None and kept else kept
        mapping = dict(zip(kept, stems, strict=True))
        return ["" if word in stop else self._keep_cjk(word, mapping[word]) for word in words]

    @staticmethod
    def _keep_cjk(word: str, stem: str) -> str:
        # Stemmers must not touch CJK bigrams; they are already the unit of meaning.
        return word if not word.isascii() and _CJK_CHAR.match(word) else stem

    def _learn(self, words: list[str]) -> None:
        unique = list(dict.fromkeys(words))
        analyzed = self._analyze(unique)
        with self._lock:
            if len(self._cache) + len(unique) > STEM_CACHE_SIZE:
                self._cache.clear()
            self._cache.update(zip(unique, analyzed, strict=True))
