"""Checks of rendered Kubernetes objects: the LWS CRD's own schema, and a lossless trip through the client's models.

Neither check rejects an unknown key by itself (the CRD sets no additionalProperties: false; the client's
models drop unknown keys on the way in), so both compare key by key.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any

import jsonschema
import yaml
from kubernetes import client

CRD = Path(__file__).resolve().parents[1] / "fixtures" / "k8s" / "leaderworkerset.x-k8s.io_leaderworkersets.yaml"


@functools.cache
def lws_schema() -> dict[str, Any]:
    """The CRD's OpenAPI v3 schema for LeaderWorkerSet v1."""
    crd = yaml.safe_load(CRD.read_text())
    assert crd["spec"]["names"]["kind"] == "LeaderWorkerSet"
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    schema: dict[str, Any] = version["schema"]["openAPIV3Schema"]
    return schema


def schema_errors(instance: Any) -> list[str]:
    """jsonschema's errors against the CRD schema, each with its path."""
    validator = jsonschema.Draft7Validator(lws_schema())
    return [f"{'.'.join(str(p) for p in e.absolute_path) or '(top)'}: {e.message}"
            for e in validator.iter_errors(instance)]


def unknown_keys(instance: Any, schema: dict[str, Any] | None = None, path: str = "") -> list[str]:
    """Keys of instance that the schema does not declare where it lists its properties (a typo passes jsonschema)."""
    schema = lws_schema() if schema is None else schema
    out: list[str] = []
    if isinstance(instance, dict):
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        for key, value in instance.items():
            if props is not None and key in props:
                out += unknown_keys(value, props[key], f"{path}.{key}")
            elif isinstance(extra, dict):
                out += unknown_keys(value, extra, f"{path}.{key}")
            elif props is not None and not schema.get("x-kubernetes-preserve-unknown-fields"):
                out.append(f"{path}.{key}")
    elif isinstance(instance, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(instance):
            out += unknown_keys(item, schema["items"], f"{path}[{i}]")
    return out


def through_client(obj: dict[str, Any], model: str) -> dict[str, Any]:
    """obj read into the client's model class and written back as the API would receive it."""
    api = client.ApiClient()
    cls = getattr(client, model)
    # Clients built on pydantic models read a dict with from_dict; older ones through the response deserializer.
    instance = cls.from_dict(obj) if hasattr(cls, "from_dict") else api._ApiClient__deserialize(obj, model)  # type: ignore[attr-defined]
    out: dict[str, Any] = api.sanitize_for_serialization(instance)  # type: ignore[no-untyped-call]
    return out


def differences(before: Any, after: Any, path: str = "") -> list[str]:
    """Every key lost, added or changed between two JSON values, by path."""
    if isinstance(before, dict) and isinstance(after, dict):
        out = [f"lost {path}.{k}" for k in before if k not in after]
        out += [f"added {path}.{k}" for k in after if k not in before]
        for key in before.keys() & after.keys():
            out += differences(before[key], after[key], f"{path}.{key}")
        return out
    if isinstance(before, list) and isinstance(after, list):
        if len(before) != len(after):
            return [f"length of {path}: {len(before)} -> {len(after)}"]
        pairs = enumerate(zip(before, after, strict=True))
        return [d for i, (b, a) in pairs for d in differences(b, a, f"{path}[{i}]")]
    if before != after or type(before) is not type(after):
        return [f"changed {path}: {before!r} -> {after!r}"]
    return []


def round_trip_losses(obj: dict[str, Any], model: str) -> list[str]:
    """What the client's model did not keep of obj (empty: the object is exactly what the model describes)."""
    return differences(obj, through_client(obj, model))


# An absolute path inside a text (an argument, a variable's value, JSON in an argument); not a URL's path.
_PATH_IN_TEXT = re.compile(r"(?:^|(?<=[\s\"'=,:\[{(]))(/[^\s\"',;)\]}]+)")


def unmounted_paths(pod_spec: dict[str, Any]) -> list[str]:
    """Absolute paths a pod's containers name in their command, args or env values that no volumeMount of that
    container holds (the pod could not see them), as `container: path`. Also a mount whose volume is missing."""
    volumes = {v["name"] for v in pod_spec.get("volumes", [])}
    out: list[str] = []
    for container in pod_spec["containers"]:
        mounts = [m["mountPath"].rstrip("/") or "/" for m in container.get("volumeMounts", [])]
        out += [f"{container['name']}: mount {m['name']} has no volume" for m in container.get("volumeMounts", [])
                if m["name"] not in volumes]
        texts = [*container.get("command", []), *container.get("args", []),
                 *(e["value"] for e in container.get("env", []) if "value" in e)]
        for text in texts:
            for match in _PATH_IN_TEXT.finditer(text):
                path = match.group(1)
                if path.startswith("//"):
                    continue  # a URL's authority (http://host/...), not a file
                if not any(path == m or path.startswith(m + "/") for m in mounts):
                    out.append(f"{container['name']}: {path}")
    return out


def pod_specs(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every pod spec among the objects (a Deployment's template, an LWS's leader and worker templates)."""
    out: list[dict[str, Any]] = []
    for obj in objects:
        if obj["kind"] == "Deployment":
            out.append(obj["spec"]["template"]["spec"])
        elif obj["kind"] == "LeaderWorkerSet":
            template = obj["spec"]["leaderWorkerTemplate"]
            out += [template["leaderTemplate"]["spec"], template["workerTemplate"]["spec"]]
    return out
