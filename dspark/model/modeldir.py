"""Model directories on disk: find one (a path or a cached Hugging Face repo), read its config and weight headers.

An edge module: the only place the architecture and weight figures touch files. It never goes to
the network: a repo id resolves only against the local Hugging Face cache. Tensor data is never
read, only each safetensors file's header.
"""

from __future__ import annotations

import json
import shlex
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dspark.core.errors import InputError
from dspark.core.extras import require_extra
from dspark.core.jsonfile import read_json_file
from dspark.model.architecture import ModelArchitecture, parse_config
from dspark.model.weights import TensorInfo, WeightsInfo

CONFIG_FILE = "config.json"
SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
MODELOPT_FILE = "hf_quant_config.json"  # ModelOpt keeps its quantization beside config.json
# The safetensors format: an 8-byte little-endian header length, then that many bytes of JSON.
_HEADER_LIMIT = 100 * 1024 * 1024  # the format's own cap on header size


@dataclass(frozen=True)
class ModelLocation:
    """A model directory on this machine, and how it was found."""

    ref: str  # what the user gave: a path or a repo id
    path: Path  # the directory holding config.json (and maybe weights)
    repo_id: str | None = None  # set when found in the Hugging Face cache

    @property
    def config_path(self) -> Path:
        """Where its config.json is."""
        return self.path / CONFIG_FILE


def config_download_command(repo_id: str) -> str:
    """A command that fetches only what planning reads: config.json and the safetensors index (for the weights)."""
    return f"huggingface-cli download {shlex.quote(repo_id)} {CONFIG_FILE} {INDEX_FILE}"


def resolve_model(ref: str, *, cache_dir: Path | str | None = None) -> ModelLocation:
    """A directory, or a Hugging Face repo id already in the local hub cache (never the network)."""
    path = Path(ref).expanduser()
    if path.is_dir():
        return ModelLocation(ref=ref, path=path.resolve())
    if path.exists():
        raise InputError(f"model '{ref}' is a file, not a model directory; pass the directory holding config.json")
    looks_like_repo = ref.count("/") == 1 and not ref.startswith((".", "/", "~"))
    if not looks_like_repo:
        raise InputError(f"model directory '{ref}' does not exist; pass a directory holding config.json")
    require_extra("hub", f"model '{ref}' is not a directory; finding it as a repo id in the Hugging Face cache")
    if not _hub_cache_has(ref, cache_dir):
        raise _not_cached(ref, cache_dir)
    from huggingface_hub import snapshot_download  # noqa: PLC0415 - 0.3 s to import; only a cached repo needs it

    try:
        snapshot = snapshot_download(ref, cache_dir=cache_dir, local_files_only=True)
    # LocalEntryNotFoundError is a FileNotFoundError and HFValidationError a ValueError in every release.
    except (OSError, ValueError) as exc:
        raise _not_cached(ref, cache_dir) from exc
    return ModelLocation(ref=ref, path=Path(str(snapshot)), repo_id=ref)


def _hub_cache_has(repo_id: str, cache_dir: Path | str | None) -> bool:
    """Whether the hub cache holds a folder for the repo (models--ORG--NAME, as huggingface_hub names it).

    Without one, snapshot_download(local_files_only=True) can only fail: this answers first, without
    importing the download machinery (a third of a second), so a recipe whose model is not cached but
    inline (the default one) plans at once.
    """
    from huggingface_hub import constants  # noqa: PLC0415 - the cache's location only: milliseconds

    root = Path(constants.HF_HUB_CACHE if cache_dir is None else cache_dir).expanduser()
    return (root / constants.REPO_ID_SEPARATOR.join(["models", *repo_id.split("/")])).is_dir()


def _not_cached(ref: str, cache_dir: Path | str | None) -> InputError:
    """The error for a repo id that the local hub cache cannot serve, with the command that fetches it."""
    return InputError(
        f"model '{ref}' is neither a directory nor a repo in the local Hugging Face cache "
        f"({cache_dir or 'HF_HUB_CACHE'})",
        hint=f"{config_download_command(ref)} (planning needs only these, not the weights), "
        "or pass the model's directory",
    )


def _read_json(path: Path) -> Any:
    """A JSON file's contents; InputError naming the file, and the line and column of a syntax error."""
    return read_json_file(path)


def load_config(location: ModelLocation) -> dict[str, Any]:
    """The model's config.json as a dict, with a ModelOpt hf_quant_config.json folded in as vLLM does."""
    path = location.config_path
    if not path.is_file():
        raise InputError(f"{path}: no config.json in the model directory; a model directory needs at least that")
    config = _read_json(path)
    if not isinstance(config, dict):
        raise InputError(f"{path}: config.json must hold a JSON object, not {type(config).__name__}")
    modelopt = location.path / MODELOPT_FILE
    if "quantization_config" not in config and modelopt.is_file():
        extra = _read_json(modelopt)
        quant = extra.get("quantization") if isinstance(extra, dict) else None
        if isinstance(quant, dict):
            config["quantization_config"] = {"quant_method": "modelopt", **quant}
    return config


def _shard_files(location: ModelLocation) -> list[Path]:
    """The safetensors files of the checkpoint: the index's shards, else the single file, else any *.safetensors."""
    index = location.path / INDEX_FILE
    if index.is_file():
        data = _read_json(index)
        weight_map = data.get("weight_map") if isinstance(data, dict) else None
        if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
            raise InputError(f"{index}: has no 'weight_map' of tensor name to shard file")
        files = [location.path / name for name in sorted(set(weight_map.values()))]
        missing = [f.name for f in files if not f.is_file()]
        if len(missing) == len(files):
            return []  # config.json and the index only (what planning asks to download): weights are estimated
        if missing:
            raise InputError(f"{index}: lists shards that are not in the directory: {', '.join(missing[:5])}")
        return files
    single = location.path / SINGLE_FILE
    if single.is_file():
        return [single]
    return sorted(location.path.glob("*.safetensors"))


def read_safetensors_header(path: Path) -> list[TensorInfo]:
    """The tensors one safetensors file describes, from its header alone (no tensor data is read)."""
    # safetensors.safe_open would map the whole file and gives no byte offsets; the header is all we need.
    try:
        with path.open("rb") as handle:
            prefix = handle.read(8)
            if len(prefix) != 8:
                raise InputError(f"{path}: too short to be a safetensors file")
            (length,) = struct.unpack("<Q", prefix)
            if length > _HEADER_LIMIT:
                raise InputError(f"{path}: header length {length} is not plausible; the file is not safetensors")
            raw = handle.read(length)
        size = path.stat().st_size
    except OSError as exc:
        raise InputError(f"{path}: cannot be read: {exc}") from exc
    if len(raw) != length:
        raise InputError(f"{path}: header cut short ({len(raw)} of {length} bytes); the file is incomplete")
    try:
        header = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: safetensors header is not valid JSON: {exc}") from exc
    if not isinstance(header, dict):
        raise InputError(f"{path}: safetensors header is not a JSON object")
    tensors = []
    end_of_data = 0
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        tensor = _tensor(path, name, entry)
        tensors.append(tensor)
        end_of_data = max(end_of_data, entry["data_offsets"][1])
    if 8 + length + end_of_data > size:
        raise InputError(
            f"{path}: header describes {8 + length + end_of_data} bytes but the file has {size}; "
            "the download is incomplete"
        )
    return tensors


def _tensor(path: Path, name: str, entry: Any) -> TensorInfo:
    """One header entry, checked: dtype string, shape of non-negative ints, begin <= end offsets."""
    ok = isinstance(entry, dict) and isinstance(entry.get("dtype"), str)
    shape = entry.get("shape") if ok else None
    offsets = entry.get("data_offsets") if ok else None
    ok = ok and isinstance(shape, list) and all(isinstance(d, int) and d >= 0 for d in shape)
    ok = ok and isinstance(offsets, list) and len(offsets) == 2 and all(isinstance(o, int) for o in offsets)
    if not ok or offsets is None or shape is None or not 0 <= offsets[0] <= offsets[1]:
        raise InputError(f"{path}: safetensors header entry '{name}' is malformed: {entry!r}")
    return TensorInfo(
        name=name,
        dtype=entry["dtype"],
        shape=tuple(shape),
        nbytes=offsets[1] - offsets[0],
        file=path.name,
    )


def read_safetensors_headers(location: ModelLocation) -> WeightsInfo | None:
    """Every tensor's name, dtype, shape and byte size from the checkpoint's headers; None without weights."""
    files = _shard_files(location)
    if not files:
        return None
    tensors: list[TensorInfo] = []
    for path in files:
        tensors.extend(read_safetensors_header(path))
    return WeightsInfo(
        tensors=tuple(tensors),
        files=tuple(f.name for f in files),
        source=str(location.path),
    )


def load_architecture(ref: str, *, cache_dir: Path | str | None = None) -> tuple[ModelArchitecture, WeightsInfo | None]:
    """The architecture of a model directory or cached repo, and its weight headers (None: config only)."""
    location = resolve_model(ref, cache_dir=cache_dir)
    config = load_config(location)
    arch = parse_config(config, str(location.config_path))
    return arch, read_safetensors_headers(location)
