"""The API server in front of the engine core, as both simulations see it: when a request sent by a client reaches
the scheduler; stdlib only.

The one copy of it (as step_cost.py is of the step's arithmetic): the advisor's model (dspark.advise.model) imports
this very file as dspark._inside_root.dspark_inside.frontend, and the scheduler replay, in the engine's
interpreter, as dspark_inside.frontend; so it imports nothing but the standard library.
"""

from __future__ import annotations


class Frontend:
    """The API server: one process takes each request in turn (HTTP, input processing), `serial` seconds of it a
    request, so requests sent together reach the engine core one after another, `hop` after each is sent."""

    def __init__(self, hop: float, serial: float) -> None:
        self.hop, self.serial = hop, min(serial, hop)
        self.free = 0.0

    def arrival(self, sent: float) -> float:
        """When a request sent at `sent` reaches the engine core."""
        self.free = max(sent, self.free) + self.serial
        return self.free + self.hop - self.serial
