"""`dspark render k8s`: validate the plan, then print its Kubernetes objects (YAML, or one JSON object)."""

from __future__ import annotations

import sys
from typing import IO

from dspark.core.errors import ExitCode
from dspark.deploy.kubernetes import RenderOptions, render_request, to_json, to_yaml
from dspark.planning.validate import ValidateRequest


def run_render_k8s(request: ValidateRequest, options: RenderOptions, *, as_json: bool, explain: bool = False,
                   out: IO[str] | None = None, err: IO[str] | None = None) -> int:
    """Print the manifests of a plan that fits (dspark.deploy.kubernetes.render_request) and its notices."""
    report, plan, objects = render_request(request, options)
    stream, notes = out or sys.stdout, err or sys.stderr
    # Notices go to stderr so that stdout stays what `kubectl apply -f -` reads.
    for line in report.settings.notices():
        print(line, file=notes)
    for finding in report.findings:
        if finding.level != "info":
            print(f"{finding.level} {finding.code}: {finding.message}", file=notes)
    if explain:
        print(report.settings.explain(), file=notes)
    stream.write((to_json(objects) if as_json else to_yaml(objects, plan.summary)) + "\n")
    stream.flush()
    return int(ExitCode.OK)
