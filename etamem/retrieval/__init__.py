"""Retrieval over the views: routing, hierarchical beam search, BM25, temporal windows and
the raw-turn fallback (see docs/design.md, 'Query path'). Views never import this package."""
from .beam import BeamTrace, HierarchyView, Scored, beam_search
from .dialogue import DialogueScoring, named_speakers, query_texts, query_vector
from .fallback import TurnIndex, confidence, rrf_fuse, turn_text, with_fallback
from .lexical import LexicalIndex, minmax, tokenize
from .retriever import RetrievalResult, SpaceIndex, amu_search_text
from .routing import Routing, largest_remainder, route
from .search import search_space
from .vector_index import VectorIndex

__all__ = ["BeamTrace", "HierarchyView", "Scored", "beam_search", "TurnIndex", "rrf_fuse", "turn_text", "LexicalIndex",
           "minmax", "tokenize", "RetrievalResult", "SpaceIndex", "amu_search_text", "Routing", "largest_remainder", "route",
           "confidence", "with_fallback", "search_space", "VectorIndex", "DialogueScoring", "named_speakers",
           "query_texts", "query_vector"]
