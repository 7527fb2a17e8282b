"""`dspark top URL`: a running engine's seats, queue, KV use, prefix hits, token rates and latencies, live.

Reads the engine's /metrics every `interval` seconds and shows the window between the last two reads, refreshed
in place on a terminal (rich); `--once` reads twice and prints one view, `--json` as one JSON object.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from typing import TextIO

import httpx
from rich import box
from rich.console import Console
from rich.table import Table

from dspark.bench.top import Scrape, TopView, fetch_metrics, fmt_quantiles, metrics_url, parse_scrape, top_view
from dspark.core.errors import InputError

MIN_INTERVAL_S = 0.2
MAX_INTERVAL_S = 3600.0


def _read(client: httpx.Client, url: str, deadline_s: float) -> Scrape:
    try:
        return parse_scrape(fetch_metrics(client, url, deadline_s))
    except httpx.HTTPStatusError as exc:
        raise InputError(f"{url} answered HTTP {exc.response.status_code}",
                         hint="give the engine server's address (its /metrics must answer)") from None
    except httpx.HTTPError as exc:
        raise InputError(f"cannot read {url}: {type(exc).__name__}",
                         hint="is the engine running there? (dspark top http://HOST:PORT)") from None


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _num(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def render_view(view: TopView, url: str) -> Table:
    """The view as a two-column table (at most 80 columns)."""
    table = Table(title=f"{view.engine or 'unknown engine'} at {url} (last {view.window_s:.1f} s)",
                  title_justify="left", box=box.SIMPLE_HEAD, show_header=False)
    table.add_column("what", no_wrap=True)
    table.add_column("value", overflow="fold")
    seats = "" if view.seats is None else f" of {view.seats}"
    table.add_row("seats used", f"{_num(view.running)}{seats}")
    table.add_row("waiting", _num(view.waiting))
    table.add_row("KV cache used", _pct(view.kv_usage))
    table.add_row("prefix-cache hits", _pct(view.prefix_hit_rate))
    table.add_row("tokens/s in, out", f"{_num(view.prompt_tps, 1)}, {_num(view.generation_tps, 1)}")
    table.add_row("preemptions", f"{_num(view.preemptions_total)} ({_num(view.preemptions_window)} in window)")
    table.add_row("TTFT p50/p90/p99", fmt_quantiles(view.ttft_s))
    table.add_row("ITL p50/p90/p99", fmt_quantiles(view.itl_s))
    return table


def top(
    url: str,
    *,
    interval: float = 2.0,
    seats: int | None = None,
    once: bool = False,
    as_json: bool = False,
    out: TextIO | None = None,
    client_factory: Callable[[], httpx.Client] = httpx.Client,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Show the engine at `url` until interrupted (once: one view); returns 0."""
    if not (MIN_INTERVAL_S <= interval <= MAX_INTERVAL_S):  # also refuses nan
        raise InputError(f"--interval {interval}: expected {MIN_INTERVAL_S} to {MAX_INTERVAL_S:g} seconds")
    if seats is not None and not 1 <= seats <= 1_000_000:
        raise InputError(f"--seats {seats}: expected 1 to 1,000,000")
    target = metrics_url(url)
    stream = out if out is not None else sys.stdout
    deadline = max(5.0, interval)
    with client_factory() as client:
        before, t0 = _read(client, target, deadline), time.monotonic()
        if once or as_json:
            sleep(interval)
            after = _read(client, target, deadline)
            view = top_view(before, after, max(time.monotonic() - t0, 1e-9), seats)
            if as_json:
                stream.write(json.dumps(view.as_json()) + "\n")
            else:
                Console(file=stream, highlight=False, width=80).print(render_view(view, url))
            return 0
        from rich.live import Live  # noqa: PLC0415 - only the live view needs it

        console = Console(file=stream, highlight=False)
        with Live(console=console, auto_refresh=False, transient=False) as live:
            try:
                while True:
                    sleep(interval)
                    after, t1 = _read(client, target, deadline), time.monotonic()
                    live.update(render_view(top_view(before, after, max(t1 - t0, 1e-9), seats), url), refresh=True)
                    before, t0 = after, t1
            except KeyboardInterrupt:
                return 0
