"""`dspark render` and its subcommands (options: dspark.commands.options.RENDER_K8S)."""

from __future__ import annotations

from typing import Any

import click

from dspark.cli import run_core
from dspark.cli.plan import validate_request
from dspark.commands import options as declared


@click.group()
def render() -> None:
    """Print deployment files for a validated plan."""


@render.command("k8s", epilog="Example: dspark render k8s flash-next-vllm --image REGISTRY/dspark-vllm:TAG | "
                "kubectl apply -f -")
@declared.apply(declared.RENDER_K8S)
@click.pass_context
def render_k8s(ctx: click.Context, /, **params: Any) -> None:
    """A LeaderWorkerSet (plans across nodes) or a Deployment, and a Service; every pod runs `dspark start`.

    Exit 0 with the manifests on stdout (YAML; --json: one v1 List), 1 when the plan does not fit, 2 bad input.
    """
    from dspark.commands.render import run_render_k8s  # noqa: PLC0415 - keep CLI start-up light
    from dspark.core.units import parse_size  # noqa: PLC0415
    from dspark.deploy.kubernetes import DEFAULT_HF_SECRET_KEY, RenderOptions  # noqa: PLC0415

    def render_core() -> int:
        values = declared.split(declared.RENDER_K8S, params)
        request = validate_request(ctx, values)
        given = values["render"]
        secret, _, key = given["hf_secret"].partition(":")
        try:
            shm = parse_size(given["shm_size"]) if given["shm_size"] else None
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--shm-size") from None
        options = RenderOptions(image=given["image"], name=given["name"], replicas=given["replicas"],
                                hf_secret=secret, hf_secret_key=key or DEFAULT_HF_SECRET_KEY,
                                ready_delay_s=given["ready_delay"], shm_bytes=shm, engine_flags=request.engine_flags,
                                secret_name=given["secret_name"], model_pvc=given["model_pvc"],
                                model_host_path=given["model_host_path"], gpu_product=given["gpu_product"])
        return run_render_k8s(request, options, **values["call"])

    run_core(ctx, render_core, json_errors=params["as_json"])
