"""The three memory views: Event and Affect semantic trees and the Time forest."""
from etamem.views.calibration import Calibrator, Thresholds
from etamem.views.semantic_tree import SemanticTree
from etamem.views.space_views import VIEWS, SpaceViews, route
from etamem.views.summaries import LLMSummariser
from etamem.views.time_forest import TimeForest, time_path

__all__ = ["Calibrator", "Thresholds", "SemanticTree", "TimeForest", "SpaceViews", "LLMSummariser", "route",
           "time_path", "VIEWS"]
