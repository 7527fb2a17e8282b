"""The API server in front of the engine core, as both simulations see it: when a request sent by a client reaches
the scheduler, and when a step's tokens reach their clients; stdlib only.

The one copy of it (as step_cost.py is of the step's arithmetic): the advisor's model (dspark.advise.model) imports
this very file as dspark._inside_root.dspark_inside.frontend, and the scheduler replay, in the engine's
interpreter, as dspark_inside.frontend; so it imports nothing but the standard library.
"""

from __future__ import annotations


class Frontend:
    """The API server: one process, one event loop, busy until `free`. It takes each request in turn (HTTP, input
    processing), `serial` seconds of it a request, so requests sent together reach the engine core one after
    another, `hop` after each is sent; and it streams every step's outputs, `per_token` seconds a token and
    `per_finish` a request that ends there, in turn with the rest: a closed-loop client has its request's last
    token, and sends its next one, only once the API server is through that step's outputs, `hop` later."""

    def __init__(self, hop: float, serial: float, per_token: float = 0.0, per_finish: float = 0.0) -> None:
        self.hop, self.serial = hop, min(serial, hop)
        self.per_token, self.per_finish = max(per_token, 0.0), max(per_finish, 0.0)
        self.free = 0.0

    def arrival(self, sent: float) -> float:
        """When a request sent at `sent` reaches the engine core."""
        self.free = max(sent, self.free) + self.serial
        return self.free + self.hop - self.serial

    def returned(self, now: float, tokens: int, finished: int = 0, steps: int = 1, dt: float = 0.0) -> float:
        """When the clients have the outputs of the step that ended at `now`: `tokens` streamed tokens, `finished`
        requests ending. `steps` > 1: a stretch of that many steps of `dt` each ending at `now`, `tokens` in each
        and the finishes in the last (the API server takes each step's outputs as they come, after what it had)."""
        work = tokens * self.per_token
        last = work + finished * self.per_finish
        if steps > 1:
            self.free = max(max(self.free, now - (steps - 1) * dt) + (steps - 1) * work + last, now + last)
        else:
            self.free = max(self.free, now) + last
        return self.free + self.hop
