"""What-if: predict step time and memory under another policy or network from one run.

``calibrate`` (analysis + :class:`~overlapscope.sim.inputs.SimInputs` ->
:class:`Calibration`; ``link``, ``contention``, ``facts`` and ``torch_fsdp`` its parts),
``schedule`` (the engine's own schedule, ``engine/schedule.py``, recorded as one step's
program under a :class:`Scenario`), ``replay`` (that program played on every rank at once),
``events`` (the replay as the analysis' event table: the analysis computes
the predicted figures), ``rescale`` (links and lane times under the scenario's network),
``predict`` (the facade: ``predict(run_dir, scenario)``), ``export``
(the predicted timeline as a Kineto run directory). The source is an ``overlapscope run``
directory or a torch FSDP1/FSDP2 trace directory. See docs/WHATIF.md.
"""

from overlapscope.sim.calibrate import Calibration, LinkModel, Measured, calibrate
from overlapscope.sim.predict import Prediction, load_calibration, predict, predict_from
from overlapscope.sim.schedule import Scenario

__all__ = [
    "Calibration",
    "LinkModel",
    "Measured",
    "Prediction",
    "Scenario",
    "calibrate",
    "load_calibration",
    "predict",
    "predict_from",
]
