"""The clock: what one engine step costs on a GPU, from hardware facts and engine behaviour; pure.

gpus.py holds the datasheet figures and achieved-fraction priors per GPU; step.py the step-time model (a roofline
per op class plus the time outside the GPU kernels). Nothing here imports the rest of dspark but the
engine-side step arithmetic: step.py's `step_terms`, `step_seconds` and `cpu_seconds` are
dspark/_inside_root/dspark_inside/step_cost.py's, the very functions the engine-side scheduler replay evaluates.
"""
