"""Model directories on disk: find one (a path or a cached Hugging Face repo), read its config and weight headers.

An edge module: the only place the architecture and weight figures touch files. It never goes to
the network: a repo id resolves only against the local Hugging Face cache. Tensor data is never
read, only each safetensors file's header.
"""

from __future__ import annotations

import math
import os
import shlex
import struct
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any, NamedTuple

from dspark.core.errors import InputError
from dspark.core.extras import require_extra
from dspark.core.files import MODEL_CONFIG, SAFETENSORS_HEADER, WEIGHT_INDEX, FileKind, open_regular, shown_path
from dspark.core.jsonfile import parse_json_text, read_json_file
from dspark.model.architecture import ModelArchitecture, parse_config
from dspark.model.weights import TensorInfo, WeightsInfo

CONFIG_FILE = "config.json"
SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
MODELOPT_FILE = "hf_quant_config.json"  # ModelOpt keeps its quantization beside config.json
# The safetensors format: an 8-byte little-endian header length, then that many bytes of JSON.
_HEADER_LIMIT = SAFETENSORS_HEADER.limit_bytes  # the format's own cap on header size (100 MB)


class ModelLocation(NamedTuple):
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
    try:
        is_dir, exists = path.is_dir(), path.exists()
    except (OSError, ValueError) as exc:  # a name too long for the OS, a NUL byte
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else "not a name a file can have"
        raise InputError(f"model directory {shown_path(ref)!r}: {reason.lower()}",
                         hint="pass the directory holding config.json (a shorter path or a link to it)") from None
    if is_dir:
        return ModelLocation(ref=ref, path=path.resolve())
    if exists:
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


def _read_json(path: Path, kind: FileKind = MODEL_CONFIG) -> Any:
    """A JSON file's contents; InputError naming the file, and the line and column of a syntax error."""
    return read_json_file(path, kind)


def load_config(location: ModelLocation) -> dict[str, Any]:
    """The model's config.json as a dict, with a ModelOpt hf_quant_config.json folded in as vLLM does."""
    path = location.config_path
    if not os.path.lexists(path):
        raise InputError(f"{path}: no config.json in the model directory; a model directory needs at least that")
    config = _read_json(path)
    if not isinstance(config, dict):
        raise InputError(f"{path}: config.json must hold a JSON object, not {type(config).__name__}")
    modelopt = location.path / MODELOPT_FILE
    if "quantization_config" not in config and os.path.lexists(modelopt):
        extra = _read_json(modelopt)
        quant = extra.get("quantization") if isinstance(extra, dict) else None
        if isinstance(quant, dict):
            config["quantization_config"] = {"quant_method": "modelopt", **quant}
    return config


def _weights_root(location: ModelLocation) -> Path:
    """The directory a shard may resolve into: the model directory, or for a Hugging Face cache snapshot the
    repo's cache folder (snapshots/REV/x.safetensors is a link to ../../blobs/HASH)."""
    root = location.path.resolve()
    if location.repo_id is not None and root.parent.name == "snapshots":
        return root.parent.parent
    return root


def _shard_path(location: ModelLocation, index: Path, tensor: str, name: str) -> Path:
    """The shard an index entry names, which must be a file name inside the model directory; InputError naming the
    entry otherwise (an index that names ../../x or /etc/x is never opened)."""
    parts = PurePosixPath(name).parts
    if not name or PurePosixPath(name).is_absolute() or PureWindowsPath(name).is_absolute() or ".." in parts \
            or "\x00" in name or "\\" in name:
        raise InputError(
            f"{index}: weight_map entry {tensor!r} names {name!r}, which is not a file inside the model directory",
            hint="an index names its shards by file name (model-00001-of-00002.safetensors); fix or remove the index")
    path = location.path / name
    root = _weights_root(location)
    try:
        resolved = path.resolve()
    except (OSError, RuntimeError):  # a link loop: the reader names it
        return path
    if resolved != root and root not in resolved.parents:
        raise InputError(
            f"{index}: weight_map entry {tensor!r} names {name!r}, a link to a file outside the model directory",
            hint="copy the shard into the model directory, or point --model at the directory that holds it")
    return path


def _shard_files(location: ModelLocation) -> list[Path]:
    """The safetensors files of the checkpoint: the index's shards, else the single file, else any *.safetensors."""
    index = location.path / INDEX_FILE
    if os.path.lexists(index):
        data = _read_json(index, WEIGHT_INDEX)
        weight_map = data.get("weight_map") if isinstance(data, dict) else None
        if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
            raise InputError(f"{index}: has no 'weight_map' of tensor name to shard file")
        names: dict[str, str] = {}
        for tensor, name in weight_map.items():
            names.setdefault(name, tensor)
        files = [_shard_path(location, index, names[name], name) for name in sorted(names)]
        missing = [f.name for f in files if not os.path.lexists(f)]
        if len(missing) == len(files):
            return []  # config.json and the index only (what planning asks to download): weights are estimated
        if missing:
            raise InputError(f"{index}: lists shards that are not in the directory: {', '.join(missing[:5])}")
        return files
    single = location.path / SINGLE_FILE
    if os.path.lexists(single):
        return [single]
    return sorted(location.path.glob("*.safetensors"))


def read_safetensors_header(path: Path) -> list[TensorInfo]:
    """The tensors one safetensors file describes, from its header alone (no tensor data is read), checked as the
    safetensors library checks them before an engine loads the file: known dtypes, each tensor's bytes equal to
    its shape times its dtype's size, offsets that tile the data without gap or overlap, within the file.

    No message shows the file's bytes (a header length is the file's first 8 bytes: a file that is not safetensors
    would have them printed)."""
    # safetensors.safe_open would map the whole file and gives no byte offsets; the header is all we need.
    with open_regular(path, SAFETENSORS_HEADER) as (handle, size):
        prefix = handle.read(8)
        if len(prefix) != 8:
            raise InputError(f"{path}: too short to be a safetensors file")
        (length,) = struct.unpack("<Q", prefix)
        if length > _HEADER_LIMIT:
            raise InputError(f"{path}: header length is not plausible (above the format's 100 MB); "
                             "the file is not safetensors")
        raw = handle.read(length)
    if len(raw) != length:
        raise InputError(f"{path}: header cut short (the file ends inside its header); the file is incomplete "
                         "or not safetensors")
    header = parse_json_text(raw, f"{path}: safetensors header")
    if not isinstance(header, dict):
        raise InputError(f"{path}: safetensors header is not a JSON object")
    tensors = [_tensor(path, name, entry) for name, entry in header.items() if name != "__metadata__"]
    offsets = {name: tuple(entry["data_offsets"]) for name, entry in header.items() if name != "__metadata__"}
    end_of_data = 0
    for tensor in sorted(tensors, key=lambda t: offsets[t.name]):
        begin, end = offsets[tensor.name]
        if begin != end_of_data:
            problem = "overlaps the tensor before it" if begin < end_of_data else "leaves a gap after the one before it"
            raise InputError(f"{path}: safetensors tensor {tensor.name!r} starts at byte {begin:,}, which {problem} "
                             f"(ends at {end_of_data:,}); the header is inconsistent",
                             hint="the file is damaged: download it again")
        end_of_data = end
    if 8 + length + end_of_data > size:
        raise InputError(
            f"{path}: header describes {8 + length + end_of_data} bytes but the file has {size}; "
            "the download is incomplete"
        )
    return tensors


# safetensors' dtypes and their sizes in bits (safetensors' Dtype::bitsize).
DTYPE_BITS = {
    "BOOL": 8, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8,
    "I16": 16, "U16": 16, "F16": 16, "BF16": 16, "I32": 32, "U32": 32, "F32": 32, "F64": 64, "I64": 64, "U64": 64,
    "C64": 64,
}
_MAX_ELEMENTS = 1 << 64  # safetensors counts elements in a usize: a shape past it overflows


def _tensor(path: Path, name: str, entry: Any) -> TensorInfo:
    """One header entry, checked: a known dtype, a shape of non-negative ints, begin <= end offsets, and bytes
    that are the shape's elements at the dtype's size."""
    where = f"{path}: safetensors header entry {name!r}"
    ok = isinstance(entry, dict) and isinstance(entry.get("dtype"), str)
    shape = entry.get("shape") if ok else None
    offsets = entry.get("data_offsets") if ok else None
    ok = ok and isinstance(shape, list) and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                                                for d in shape)
    ok = ok and isinstance(offsets, list) and len(offsets) == 2 and all(
        isinstance(o, int) and not isinstance(o, bool) for o in offsets)
    if not ok or offsets is None or shape is None or not 0 <= offsets[0] <= offsets[1]:
        raise InputError(f"{where} is malformed: it needs a dtype string, a shape of whole numbers and "
                         "data_offsets [begin, end] with begin <= end", hint="the file is damaged: download it again")
    dtype = entry["dtype"]
    if dtype not in DTYPE_BITS:
        raise InputError(f"{where} has dtype {shown(dtype)}, which is not a safetensors dtype "
                         f"({', '.join(DTYPE_BITS)})", hint="the file is damaged or not safetensors")
    elements = math.prod(shape)
    if elements >= _MAX_ELEMENTS:
        raise InputError(f"{where} has a shape of about 2^{elements.bit_length() - 1} elements, more than "
                         "safetensors can count (2^64)", hint="the file is damaged: download it again")
    nbits = elements * DTYPE_BITS[dtype]
    stored = offsets[1] - offsets[0]
    if nbits % 8 or nbits // 8 != stored:
        raise InputError(f"{where}: shape {shown(shape)} of {dtype} is {nbits / 8:,g} bytes, but its data_offsets "
                         f"span {stored:,}; the header is inconsistent", hint="the file is damaged: download it again")
    return TensorInfo(
        name=name,
        dtype=dtype,
        shape=tuple(shape),
        nbytes=stored,
        file=path.name,
    )


def shown(value: object) -> str:
    """A header value for a message, cut to a line (a header is the file's own text)."""
    text = repr(value)
    return text if len(text) <= 80 else text[:60] + f"… ({len(text):,} characters)"


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
