"""The clock: what one engine step costs on a GPU, from hardware facts and engine behaviour; pure.

gpus.py holds the datasheet figures and achieved-fraction priors per GPU; step.py the step-time model (a roofline
per op class plus the time outside the GPU kernels). Nothing here imports the rest of dspark: step.py's
`step_seconds` is also what the engine-side scheduler replay evaluates (dspark_inside/replay.py carries
a copy, checked equal by tests/perf/test_step.py).
"""
