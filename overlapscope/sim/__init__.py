"""What-if: predict step time and memory under another policy or network from one run.

``calibrate`` (run -> :class:`Calibration`), ``schedule`` (a pure discrete-event replay of one
step under a :class:`Scenario`), ``predict`` (the facade: ``predict(run_dir, scenario)``),
``export`` (the predicted timeline as a Kineto run directory). See docs/WHATIF.md.
"""

from overlapscope.sim.calibrate import Calibration, LinkModel, Measured, calibrate
from overlapscope.sim.predict import Prediction, load_calibration, predict, predict_from
from overlapscope.sim.schedule import Policy, Scenario

__all__ = [
    "Calibration",
    "LinkModel",
    "Measured",
    "Policy",
    "Prediction",
    "Scenario",
    "calibrate",
    "load_calibration",
    "predict",
    "predict_from",
]
