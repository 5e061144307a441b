"""Retrieval over the views: routing, hierarchical beam search, BM25, temporal windows and
the raw-turn fallback (see docs/design.md, 'Query path'). Views never import this package."""
from etamem.retrieval.beam import BeamTrace, HierarchyView, Scored, beam_search
from etamem.retrieval.dialogue import DialogueScoring, named_speakers, query_texts, query_vector
from etamem.retrieval.fallback import TurnIndex, confidence, rrf_fuse, turn_text, with_fallback
from etamem.retrieval.lexical import LexicalIndex, minmax, tokenize
from etamem.retrieval.options import SearchOptions
from etamem.retrieval.retriever import RetrievalResult, SpaceIndex, amu_search_text
from etamem.retrieval.routing import Routing, largest_remainder, route
from etamem.retrieval.space_search import search_space
from etamem.retrieval.vector_index import VectorIndex

__all__ = ["BeamTrace", "HierarchyView", "Scored", "beam_search", "TurnIndex", "rrf_fuse", "turn_text", "LexicalIndex",
           "minmax", "tokenize", "RetrievalResult", "SpaceIndex", "amu_search_text", "Routing", "largest_remainder", "route",
           "confidence", "with_fallback", "search_space", "SearchOptions", "VectorIndex", "DialogueScoring", "named_speakers",
           "query_texts", "query_vector"]
