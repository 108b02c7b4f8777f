"""The numpy array types the vectorised code annotates with, named once."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]
CodeArray = npt.NDArray[np.int8]  # codes of a categorical of few categories
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]
ObjArray = npt.NDArray[np.object_]
