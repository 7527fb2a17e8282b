"""Code dspark runs inside an engine's interpreter: `python -m dspark_inside.<engine>.<tool>`, request on stdin.

Standard library only (the engine's interpreter may have no dspark); this package's folder is alone on
PYTHONPATH ahead of the engine's, and holds nothing else, so nothing of dspark can shadow an engine module.
dspark itself imports two modules of it at run time, step_cost (the step-time arithmetic) and frontend (the API
server's intake), each a single copy, by their names in the dspark package; the rest it only runs, or reads under
TYPE_CHECKING (shapes).
The request, the answer line and the stdout noise are dspark_inside.protocol's; their shapes are
dspark_inside.shapes'. dspark runs a tool with dspark.engines.inside.run_inside.
"""

from __future__ import annotations

import os
import sys

# `python -m` puts the working directory first on sys.path (Python < 3.11, and later ones without -P): a folder
# named like an engine module there would shadow it. The only sys.path edit of dspark's inside code, made only
# where this package is top-level (the engine's interpreter, the tests): dspark's own process imports
# step_cost and frontend as dspark._inside_root.dspark_inside.* (dspark.perf.step, dspark.advise.model), and its
# sys.path is its own.
if __name__ == "dspark_inside" and sys.path and not getattr(sys.flags, "safe_path", False) \
        and sys.path[0] in ("", os.getcwd()):  # noqa: PTH109 - the very string -m puts on sys.path
    del sys.path[0]
