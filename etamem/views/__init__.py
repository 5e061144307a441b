"""The three memory views: Event and Affect semantic trees and the Time forest."""
from .calibration import Calibrator, Thresholds
from .semantic_tree import SemanticTree
from .space_views import VIEWS, SpaceViews, route
from .summaries import LLMSummariser
from .time_forest import TimeForest, time_path

__all__ = ["Calibrator", "Thresholds", "SemanticTree", "TimeForest", "SpaceViews", "LLMSummariser", "route",
           "time_path", "VIEWS"]
