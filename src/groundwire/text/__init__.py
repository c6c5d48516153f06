"""Text analysis: one :class:`Analyzer` for index and query alike."""

from groundwire.text.analyzer import Analyzer
from groundwire.text.query import query_stopwords
from groundwire.text.stopwords import STOPWORDS, stopwords_for

__all__ = ["STOPWORDS", "Analyzer", "query_stopwords", "stopwords_for"]
