"""FTA-Mem construction (DESIGN §10): boundary-preserving window segmentation, Fact-Time-Affect
units with carry-over and fusion, and relation links with their lifecycle.

- `segmentation`: `segment_session` (Algorithm 1 and the ablation modes), `OfflineBoundaryDetector`,
  `LLMBoundaryDetector`, `score_boundaries`;
- `units`: `FTAUnit` and its anchors, `RuleUnitExtractor`, `LLMUnitExtractor`, `construct_units`, `fuse`;
- `links`: `UnitGraph` (candidates, classification, lifecycle, `history`), `classify_pair`,
  `LLMLinkClassifier`;
- `rules`: the word rules shared by the offline paths.
"""
from .links import (LLMLinkClassifier, Link, LinkEnd, Neighbour, RuleLinkClassifier, UnitGraph, classify_pair,
                    history)
from .segmentation import (Cut, LLMBoundaryDetector, OfflineBoundaryDetector, Segment, Segmentation, score_boundaries,
                           segment_dialogue, segment_session)
from .units import (AffectAnchor, Candidate, EvidenceSpan, FactAnchor, FTAUnit, LLMUnitExtractor, RuleUnitExtractor,
                    TimeAnchor, UnitConstruction, construct_units, fuse, retrieval_text)

__all__ = ["AffectAnchor", "Candidate", "Cut", "EvidenceSpan", "FTAUnit", "FactAnchor", "LLMBoundaryDetector",
           "LLMLinkClassifier", "LLMUnitExtractor", "Link", "LinkEnd", "Neighbour", "OfflineBoundaryDetector",
           "RuleLinkClassifier", "RuleUnitExtractor", "Segment", "Segmentation", "TimeAnchor", "UnitConstruction",
           "UnitGraph", "classify_pair", "construct_units", "fuse", "history", "retrieval_text", "score_boundaries",
           "segment_dialogue", "segment_session"]
