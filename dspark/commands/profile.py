"""`dspark profile URL`: measure a live engine's step costs for `dspark advise --calibrate`; a table or one JSON."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, TextIO

from dspark.bench.profile import run_profile
from dspark.bench.report import write_atomic


def profile(url: str, *, model: str | None = None, as_json: bool = False, out_file: Path | None = None,
            out: TextIO | None = None) -> int:
    """Run the profile's benches at `url`; print its points (or the JSON), write the JSON to out_file."""
    data = run_profile(url, model=model)
    text = json.dumps(data, indent=2, allow_nan=False) + "\n"
    if out_file is not None:
        write_atomic(out_file, text)
    stream = out or sys.stdout
    stream.write(text if as_json else render(data))
    return 0


def _ms(value: Any) -> str:
    return f"{value * 1e3:,.2f}" if isinstance(value, (int, float)) else "–"


def render(data: dict[str, Any]) -> str:
    """The points as a table: batch, prompt, step time, prefill time, tokens per step, where they come from."""
    lines = [f"profile of {data.get('model')} at {data.get('url')} ({data.get('engine') or 'engine unknown'})", "",
             "| batch | prompt | step ms (ITL) | prefill ms | decode s | tokens/step | source |",
             "|-------|--------|---------------|------------|----------|-------------|--------|"]
    for p in data.get("points", []):
        tokens = p.get("iteration_tokens_mean")
        decode = p.get("decode_mean_s")
        lines.append(f"| {p['batch']:>5} | {p['input_len']:>6} | {_ms(p.get('itl_mean_s')):>13} | "
                     f"{_ms(p.get('prefill_mean_s')):>10} | {decode if decode is None else f'{decode:.3f}':>8} | "
                     f"{'–' if tokens is None else f'{tokens:,.1f}':>11} | {p.get('source', '–')} |")
    lines += ["", "calibrate with: dspark advise ... --calibrate FILE (write it with --out FILE)"]
    return "\n".join(lines) + "\n"
