"""FTA-Mem (see docs/design.md, 'FTA-Mem'): boundary-preserving window segmentation, Fact-Time-Affect units with
carry-over and fusion, relation links with their lifecycle, longitudinal memory, retrieval and
the memory packet; on the engine through `Config(method="fta")` (`engine`, `search`).

- `segmentation`: `segment_session` (Algorithm 1 and the ablation modes), `OfflineBoundaryDetector`,
  `LLMBoundaryDetector`, `score_boundaries`;
- `units`: `FTAUnit` and its anchors, `RuleUnitExtractor`, `LLMUnitExtractor`, `construct_units`, `fuse`;
- `links`: `UnitGraph` (candidates, classification, lifecycle, `history`), `classify_pair`,
  `LLMLinkClassifier`;
- `profiles`: longitudinal memory per speaker (`SpeakerProfile`, `update_profiles`, `forget_units`,
  `render_profiles`, JSON);
- `retrieval`: `query_features`, `cue_score` and its components, `rank` (R = lam cos + (1 - lam) c),
  `expand_neighbours`, `lifecycle_order`, `chronological`;
- `packet`: `render_packet` (the four-section memory packet or the flat ablation), `rewrite_query`,
  `answer_from_packet`;
- `engine` / `search`: construction, links and retrieval over a `Memory`'s store and live space;
- `codec`: units as JSON; `inspection`: links for `etamem inspect --links` and the HTML page;
- `rules`: the word rules shared by the offline paths.
"""
from etamem.fta.links import (
           Link,
           LinkEnd,
           LLMLinkClassifier,
           Neighbour,
           RuleLinkClassifier,
           UnitGraph,
           classify_pair,
           history,
)
from etamem.fta.packet import answer_from_packet, render_packet, rewrite_query
from etamem.fta.profiles import (
           CurrentState,
           ProfileCaps,
           Relationship,
           Source,
           SpeakerProfile,
           StableFact,
           SupportNote,
           forget_units,
           profiles_from_json,
           profiles_to_json,
           render_profiles,
           update_profiles,
)
from etamem.fta.retrieval import (
           QueryFeatures,
           Scored,
           chronological,
           cue_components,
           cue_score,
           expand_neighbours,
           lifecycle_order,
           query_features,
           question_form,
           rank,
)
from etamem.fta.segmentation import (
           Cut,
           LLMBoundaryDetector,
           OfflineBoundaryDetector,
           Segment,
           Segmentation,
           score_boundaries,
           segment_dialogue,
           segment_session,
)
from etamem.fta.units import (
           AffectAnchor,
           Candidate,
           EvidenceSpan,
           FactAnchor,
           FTAUnit,
           LLMUnitExtractor,
           RuleUnitExtractor,
           TimeAnchor,
           UnitConstruction,
           construct_units,
           fuse,
           retrieval_text,
)

__all__ = ["AffectAnchor", "Candidate", "CurrentState", "Cut", "EvidenceSpan", "FTAUnit", "FactAnchor",
           "LLMBoundaryDetector", "LLMLinkClassifier", "LLMUnitExtractor", "Link", "LinkEnd", "Neighbour",
           "OfflineBoundaryDetector", "ProfileCaps", "QueryFeatures", "Relationship", "RuleLinkClassifier",
           "RuleUnitExtractor", "Scored", "Segment", "Segmentation", "Source", "SpeakerProfile", "StableFact",
           "SupportNote", "TimeAnchor", "UnitConstruction", "UnitGraph", "answer_from_packet", "chronological",
           "classify_pair", "construct_units", "cue_components", "cue_score", "expand_neighbours", "forget_units",
           "fuse", "history", "lifecycle_order", "profiles_from_json", "profiles_to_json", "query_features",
           "question_form", "rank", "render_packet", "render_profiles", "retrieval_text", "rewrite_query",
           "score_boundaries", "segment_dialogue", "segment_session", "update_profiles"]
