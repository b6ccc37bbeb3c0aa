"""The graph optimizer: passes over flows and the pipeline that runs them by opt level."""

from myelin.optimize.pipeline import (DEFAULT_LEVEL, MAX_LEVEL, PIPELINE, Context, Report,
                                      optimize, pass_names)

__all__ = ["DEFAULT_LEVEL", "MAX_LEVEL", "PIPELINE", "Context", "Report", "optimize",
           "pass_names"]
