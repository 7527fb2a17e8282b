"""`dspark render k8s`: validate the plan, then print its Kubernetes objects (YAML, or one JSON object)."""

from __future__ import annotations

import sys
from typing import IO

from dspark.core.errors import ExitCode
from dspark.core.redact import known_secrets, redact_text, shown
from dspark.deploy.kubernetes import RenderOptions, render_request, secret_values, to_json, to_yaml
from dspark.planning.validate import ValidateRequest


def run_render_k8s(request: ValidateRequest, options: RenderOptions, *, as_json: bool, explain: bool = False,
                   out: IO[str] | None = None, err: IO[str] | None = None) -> int:
    """Print the manifests of a plan that fits (dspark.deploy.kubernetes.render_request) and its notices.

    Neither holds a secret: the manifests reference Secrets, and the text printed is redacted as a last guard
    (a secret value the plan was given, wherever it would appear, is `***`)."""
    report, plan, objects = render_request(request, options)
    stream, notes = out or sys.stdout, err or sys.stderr
    known = secret_values(report, options)
    # Notices go to stderr so that stdout stays what `kubectl apply -f -` reads.
    for line in (*report.settings.notices(), *plan.notes):
        print(shown(line, known), file=notes)
    for finding in report.findings:
        if finding.level != "info":
            print(shown(f"{finding.level} {finding.code}: {finding.message}", known), file=notes)
    if explain:
        print(shown(report.settings.explain(), known), file=notes)
    text = to_json(objects) if as_json else to_yaml(objects, plan.summary)
    stream.write(redact_text(text, known | set(known_secrets()), patterns=False) + "\n")
    stream.flush()
    return int(ExitCode.OK)
