"""Runtime: the launch plan and its exec seam, supervision of a started engine."""
