"""Retrieval over the views: routing, hierarchical beam search, BM25, temporal windows and
the raw-turn fallback (DESIGN §7-8). Views never import this package."""
from .beam import BeamTrace, HierarchyView, Scored, beam_search
from .fallback import TurnIndex, rrf_fuse, turn_text
from .lexical import LexicalIndex, minmax, tokenize
from .retriever import RetrievalResult, SpaceIndex, amu_search_text
from .routing import Routing, largest_remainder, route

__all__ = ["BeamTrace", "HierarchyView", "Scored", "beam_search", "TurnIndex", "rrf_fuse", "turn_text", "LexicalIndex",
           "minmax", "tokenize", "RetrievalResult", "SpaceIndex", "amu_search_text", "Routing", "largest_remainder", "route"]
