"""Model directories: resolving a path or a cached repo offline, reading config.json and safetensors headers."""

from __future__ import annotations

import json
import os
import shutil
import socket
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from safetensors.numpy import save_file

from dspark.core.errors import ArchitectureError, InputError
from dspark.model.architecture import AttentionLayer
from dspark.model.modeldir import (
    ModelLocation,
    load_architecture,
    load_config,
    read_safetensors_header,
    read_safetensors_headers,
    resolve_model,
)
from dspark.model.weights import TensorInfo

CONFIGS = Path(__file__).resolve().parents[1] / "fixtures" / "configs"
TINY = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "num_hidden_layers": 2,
    "hidden_size": 64,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 128,
    "vocab_size": 100,
    "max_position_embeddings": 2048,
    "torch_dtype": "float16",
}


@pytest.fixture(autouse=True)
def no_network(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    """Record any attempt to reach the network; every test asserts there was none."""
    attempts: list[Any] = []

    def refuse(*args: Any, **kwargs: Any) -> Any:
        attempts.append(args)
        raise OSError("network disabled in tests")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    yield attempts
    assert attempts == []


def model_dir(tmp_path: Path, config: Any = None, name: str = "model") -> Path:
    path = tmp_path / name
    path.mkdir()
    (path / "config.json").write_text(json.dumps(TINY if config is None else config))
    return path


def tiny_tensors(layers: range) -> dict[str, npt.NDArray[Any]]:
    out: dict[str, npt.NDArray[Any]] = {}
    for i in layers:
        out[f"model.layers.{i}.self_attn.q_proj.weight"] = np.zeros((64, 64), dtype=np.float16)
        out[f"model.layers.{i}.self_attn.k_proj.weight"] = np.zeros((32, 64), dtype=np.float16)
        out[f"model.layers.{i}.input_layernorm.weight"] = np.zeros((64,), dtype=np.float32)
        out[f"model.layers.{i}.mlp.down_proj.qweight"] = np.zeros((64, 32), dtype=np.int8)
    return out


def test_resolve_directory(tmp_path: Path) -> None:
    path = model_dir(tmp_path)
    location = resolve_model(str(path))
    assert location == ModelLocation(ref=str(path), path=path.resolve())
    assert location.config_path == path.resolve() / "config.json"


@pytest.mark.parametrize(
    ("ref", "needle"),
    [
        ("/no/such/dir", "does not exist"),
        ("./relative/missing", "does not exist"),
        ("org/not-downloaded", "not-downloaded' is neither a directory nor a repo in the local Hugging Face cache"),
        ("org/bad name", "local Hugging Face cache"),
    ],
)
def test_resolve_missing(tmp_path: Path, ref: str, needle: str) -> None:
    with pytest.raises(InputError, match=needle):
        resolve_model(ref, cache_dir=tmp_path / "hub")


def test_resolve_file_is_refused(tmp_path: Path) -> None:
    path = model_dir(tmp_path) / "config.json"
    with pytest.raises(InputError, match="is a file, not a model directory"):
        resolve_model(str(path))


def cached_repo(tmp_path: Path, repo: str, files: dict[str, Any]) -> Path:
    """Lay out a repo the way huggingface_hub caches it: refs/main -> snapshots/<commit>/."""
    root = tmp_path / "hub" / ("models--" + repo.replace("/", "--"))
    snapshot = root / "snapshots" / "0123abcd"
    snapshot.mkdir(parents=True)
    (root / "refs").mkdir()
    (root / "refs" / "main").write_text("0123abcd")
    for name, content in files.items():
        (snapshot / name).write_text(json.dumps(content))
    return snapshot


def test_a_repo_folder_without_a_snapshot_is_refused_by_the_hub_lookup(tmp_path: Path) -> None:
    (tmp_path / "hub" / "models--org--empty" / "refs").mkdir(parents=True)  # found by name, holds nothing
    with pytest.raises(InputError, match="'org/empty' is neither a directory nor a repo in the local") as info:
        resolve_model("org/empty", cache_dir=tmp_path / "hub")
    assert info.value.__cause__ is not None  # snapshot_download itself was asked, and said no

def test_resolve_repo_from_local_cache(tmp_path: Path) -> None:
    snapshot = cached_repo(tmp_path, "org/tiny", {"config.json": TINY})
    location = resolve_model("org/tiny", cache_dir=tmp_path / "hub")
    assert location == ModelLocation(ref="org/tiny", path=snapshot, repo_id="org/tiny")
    arch, weights = load_architecture("org/tiny", cache_dir=tmp_path / "hub")
    assert arch.source == str(snapshot / "config.json")
    assert weights is None


def test_load_config_folds_in_modelopt_quantization(tmp_path: Path) -> None:
    path = model_dir(tmp_path)
    (path / "hf_quant_config.json").write_text(json.dumps({"quantization": {"quant_algo": "NVFP4", "group_size": 16}}))
    config = load_config(resolve_model(str(path)))
    assert config["quantization_config"] == {"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16}
    arch, _ = load_architecture(str(path))
    assert (arch.quantization, arch.weight_format) == ("modelopt_fp4", "nvfp4")


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ('{\n  "model_type": "llama",\n  "hidden_size": 64,,\n}', "not valid JSON at line 3, column 21"),
        ('{"a": 1}\n[', "not valid JSON at line 2, column 1"),
        ("[1, 2]", "must hold a JSON object, not list"),
    ],
)
def test_malformed_config(tmp_path: Path, text: str, needle: str) -> None:
    path = tmp_path / "model"
    path.mkdir()
    (path / "config.json").write_text(text)
    with pytest.raises(InputError, match=needle) as info:
        load_config(resolve_model(str(path)))
    assert str(path / "config.json") in str(info.value)


def test_missing_config(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError) as info:
        load_architecture(str(tmp_path / "empty"))
    assert str(tmp_path / "empty" / "config.json") in str(info.value)
    assert "no config.json" in str(info.value)


def test_architecture_error_names_the_config_file(tmp_path: Path) -> None:
    path = model_dir(tmp_path, {k: v for k, v in TINY.items() if k != "num_attention_heads"})
    with pytest.raises(ArchitectureError) as info:
        load_architecture(str(path))
    assert str(path.resolve() / "config.json") in str(info.value)
    assert "'num_attention_heads'" in str(info.value)


def test_config_only_directory_has_no_weights(tmp_path: Path) -> None:
    arch, weights = load_architecture(str(model_dir(tmp_path)))
    assert weights is None
    assert arch.layers == (AttentionLayer(num_kv_heads=2, head_dim=16),) * 2
    assert arch.dtype == "float16"


def test_single_file_headers(tmp_path: Path) -> None:
    path = model_dir(tmp_path)
    tensors = tiny_tensors(range(2))
    save_file(tensors, str(path / "model.safetensors"), metadata={"format": "pt"})
    info = read_safetensors_headers(resolve_model(str(path)))
    assert info is not None
    assert info.files == ("model.safetensors",)
    by_name = {t.name: t for t in info.tensors}
    assert set(by_name) == set(tensors)
    assert by_name["model.layers.0.self_attn.q_proj.weight"] == TensorInfo(
        name="model.layers.0.self_attn.q_proj.weight",
        dtype="F16",
        shape=(64, 64),
        nbytes=8192,
        file="model.safetensors",
    )
    assert by_name["model.layers.1.input_layernorm.weight"].dtype == "F32"
    assert by_name["model.layers.1.mlp.down_proj.qweight"].nbytes == 64 * 32
    # The header's sizes account for every data byte of the file.
    data_bytes = sum(array.nbytes for array in tensors.values())
    assert info.total_bytes == data_bytes == 2 * (8192 + 4096 + 256 + 2048)
    (length,) = struct.unpack("<Q", (path / "model.safetensors").read_bytes()[:8])
    assert (path / "model.safetensors").stat().st_size == 8 + length + data_bytes


def test_sharded_headers_follow_the_index(tmp_path: Path) -> None:
    path = model_dir(tmp_path)
    first, second = tiny_tensors(range(1)), tiny_tensors(range(1, 2))
    save_file(first, str(path / "model-00001-of-00002.safetensors"))
    save_file(second, str(path / "model-00002-of-00002.safetensors"))
    save_file({"unlisted": np.zeros(4, dtype=np.float32)}, str(path / "stray.safetensors"))
    weight_map = dict.fromkeys(first, "model-00001-of-00002.safetensors")
    weight_map.update(dict.fromkeys(second, "model-00002-of-00002.safetensors"))
    (path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    arch, info = load_architecture(str(path))
    assert info is not None
    assert info.files == ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors")
    assert {t.name for t in info.tensors} == set(weight_map)  # the stray file is not a shard
    assert {t.file for t in info.tensors if ".1." in t.name} == {"model-00002-of-00002.safetensors"}
    assert info.total_bytes == 2 * (8192 + 4096 + 256 + 2048)
    assert arch.num_layers == 2


def test_only_headers_are_read(tmp_path: Path) -> None:
    """A 1 TiB sparse file: reading its header must not touch (or allocate) the data."""
    path = model_dir(tmp_path)
    size = 1 << 40
    header = json.dumps({"big": {"dtype": "BF16", "shape": [1 << 39], "data_offsets": [0, size]}}).encode()
    shard = path / "model.safetensors"
    with shard.open("wb") as handle:
        handle.write(struct.pack("<Q", len(header)) + header)
        handle.truncate(8 + len(header) + size)
    info = read_safetensors_headers(resolve_model(str(path)))
    assert info is not None
    assert info.tensors == (TensorInfo("big", "BF16", (1 << 39,), size, "model.safetensors"),)
    assert shard.stat().st_blocks * 512 < 1 << 20  # still sparse: no data was written or read


def write_raw(path: Path, payload: bytes) -> Path:
    path.write_bytes(payload)
    return path


def header_bytes(header: dict[str, Any], data: int = 0) -> bytes:
    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw + b"\0" * data


@pytest.mark.parametrize(
    ("payload", "needle"),
    [
        (b"abc", "too short to be a safetensors file"),
        (struct.pack("<Q", 1 << 40), "header length is not plausible"),
        (struct.pack("<Q", 100) + b"{}", "header cut short"),
        (struct.pack("<Q", 3) + b"{x}", "header: not valid JSON"),
        (header_bytes([]), "header is not a JSON object"),  # type: ignore[arg-type]
        (header_bytes({"t": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, data=4), "download is incomplete"),
        (header_bytes({"t": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}}, 8), "entry 't' is malformed"),
        (header_bytes({"t": {"dtype": "F32", "shape": [2], "data_offsets": [8, 0]}}, 8), "entry 't' is malformed"),
        (header_bytes({"t": {"shape": [2], "data_offsets": [0, 8]}}, 8), "entry 't' is malformed"),
        (header_bytes({"t": [1, 2]}, 8), "entry 't' is malformed"),
    ],
)
def test_bad_safetensors_files(tmp_path: Path, payload: bytes, needle: str) -> None:
    path = write_raw(tmp_path / "x.safetensors", payload)
    with pytest.raises(InputError, match=needle) as info:
        read_safetensors_header(path)
    assert str(path) in str(info.value)


def test_metadata_entry_is_not_a_tensor(tmp_path: Path) -> None:
    header = {"__metadata__": {"format": "pt"}, "t": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}
    path = write_raw(tmp_path / "x.safetensors", header_bytes(header, data=8))
    assert read_safetensors_header(path) == [TensorInfo("t", "F32", (2,), 8, "x.safetensors")]


@pytest.mark.parametrize(
    ("index", "needle"),
    [
        ({"metadata": {}}, "has no 'weight_map'"),
        ({"weight_map": {"a": 1}}, "has no 'weight_map'"),
    ],
)
def test_bad_index(tmp_path: Path, index: dict[str, Any], needle: str) -> None:
    path = model_dir(tmp_path)
    (path / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(InputError, match=needle):
        load_architecture(str(path))


def test_index_with_some_shards_missing_is_an_incomplete_download(tmp_path: Path) -> None:
    path = model_dir(tmp_path)
    header = {"t": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}
    write_raw(path / "model-00001.safetensors", header_bytes(header, data=8))
    index = {"weight_map": {"t": "model-00001.safetensors", "u": "model-00009.safetensors"}}
    (path / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(InputError, match=r"not in the directory: model-00009\.safetensors"):
        load_architecture(str(path))


def test_config_and_index_alone_plan_without_weights(tmp_path: Path) -> None:
    # What the hint for an uncached repo downloads: config.json and the index, no shard.
    path = model_dir(tmp_path)
    (path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"t": "model-00001.safetensors"}}))
    arch, weights = load_architecture(str(path))
    assert weights is None
    assert arch.num_layers > 0


def test_uncached_repo_hint_downloads_only_what_planning_reads(tmp_path: Path) -> None:
    with pytest.raises(InputError) as err:
        resolve_model("nosuch-org/nosuch-model", cache_dir=tmp_path)
    assert err.value.hint is not None
    assert "huggingface-cli download nosuch-org/nosuch-model config.json model.safetensors.index.json" in err.value.hint


def test_real_fixture_config_in_a_directory(tmp_path: Path) -> None:
    path = tmp_path / "qwen3-next"
    path.mkdir()
    shutil.copy(CONFIGS / "qwen3-next-80b-a3b-instruct.json", path / "config.json")
    arch, weights = load_architecture(str(path))
    assert weights is None
    assert arch.parameter_count == 79_674_391_296
    assert arch.source == str(path.resolve() / "config.json")


# --- issue 26: headers that disagree with themselves, indexes that leave the directory -------------------------

@pytest.mark.parametrize(
    ("header", "data", "needle"),
    [
        # The [1e30, 1e30] tensor that was once planned as "1.86e51 GiB (exact)".
        ({"t": {"dtype": "BF16", "shape": [10**30, 10**30], "data_offsets": [0, 8]}}, 8, "more than safetensors can"),
        ({"t": {"dtype": "F32", "shape": [4], "data_offsets": [0, 8]}}, 8, r"shape \[4\] of F32 is 16 bytes, but"),
        ({"t": {"dtype": "F4", "shape": [3], "data_offsets": [0, 2]}}, 2, "is 1.5 bytes"),
        ({"t": {"dtype": "Q4_K", "shape": [2], "data_offsets": [0, 8]}}, 8, "'Q4_K', which is not a safetensors dtype"),
        ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
          "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}, 12, "'b' starts at byte 4, which overlaps"),
        ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}}, 16,
         "'a' starts at byte 8, which leaves a gap"),
        ({"t": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, 7, "download is incomplete"),
        ({"t": {"dtype": "F32", "shape": [True, 2], "data_offsets": [0, 8]}}, 8, "entry 't' is malformed"),
    ],
)
def test_inconsistent_safetensors_headers_are_input_errors(tmp_path: Path, header: dict[str, Any], data: int,
                                                          needle: str) -> None:
    path = write_raw(tmp_path / "x.safetensors", header_bytes(header, data))
    with pytest.raises(InputError, match=needle) as info:
        read_safetensors_header(path)
    assert str(path) in str(info.value)


def test_zero_sized_tensors_and_every_safetensors_dtype_are_read(tmp_path: Path) -> None:
    header = {"empty": {"dtype": "BF16", "shape": [0, 4], "data_offsets": [0, 0]},
              "packed": {"dtype": "F4", "shape": [4], "data_offsets": [0, 2]},
              "scale": {"dtype": "F8_E8M0", "shape": [2], "data_offsets": [2, 4]}}
    path = write_raw(tmp_path / "x.safetensors", header_bytes(header, 4))
    assert [t.nbytes for t in read_safetensors_header(path)] == [0, 2, 2]


@pytest.mark.parametrize("header_json", [
    b'{"t": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",  # RecursionError in json, caught and worded
    b'{"t": {"dtype": "F32", "shape": [' + b"9" * 5000 + b'], "data_offsets": [0, 8]}}',  # Python's int limit
    b'{"t": {"dtype": "F32", "shape": [2], "data_offsets": [0, NaN]}}',
])
def test_hostile_header_json_is_an_input_error(tmp_path: Path, header_json: bytes) -> None:
    path = write_raw(tmp_path / "x.safetensors", struct.pack("<Q", len(header_json)) + header_json)
    with pytest.raises(InputError, match="safetensors header: ") as info:
        read_safetensors_header(path)
    assert len(str(info.value)) < 400  # the cause in words, not the header


def test_no_message_shows_the_bytes_of_a_file_that_is_not_safetensors(tmp_path: Path) -> None:
    """The first 8 bytes are the header length: printing it printed the start of whatever file was named."""
    secret = b"sk-SECRET-token-0123456789\n"
    for payload in (secret, secret[:8] + b"{", struct.pack("<Q", 40) + b'{"t": {"dtype": "sk-SECRET-x", "shape": []}}'):
        path = write_raw(tmp_path / "x.safetensors", payload)
        with pytest.raises(InputError) as info:
            read_safetensors_header(path)
        message = str(info.value)
        assert "SECRET" not in message and str(struct.unpack("<Q", payload[:8])[0]) not in message


@pytest.mark.parametrize("entry", ["../outside.safetensors", "../../outside.safetensors", "/etc/passwd",
                                   "sub/../../outside.safetensors", "C:\\\\x.safetensors", "a\\\\..\\\\..\\\\x"])
def test_an_index_naming_a_file_outside_the_model_directory_is_refused(tmp_path: Path, entry: str) -> None:
    path = model_dir(tmp_path)
    outside = tmp_path / "outside.safetensors"
    outside.write_bytes(b"sk-SECRET-contents-of-another-file")
    (path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"lm_head.weight": entry}}))
    with pytest.raises(InputError, match=r"weight_map entry 'lm_head\.weight' names .*(not a file inside|outside) the "
                                         "model directory") as info:
        load_architecture(str(path))
    assert "SECRET" not in str(info.value)


def test_an_index_entry_linking_out_of_the_model_directory_is_refused(tmp_path: Path) -> None:
    path = model_dir(tmp_path)
    outside = tmp_path / "elsewhere.safetensors"
    outside.write_bytes(header_bytes({"t": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, 8))
    (path / "model-00001.safetensors").symlink_to(outside)
    (path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"t": "model-00001.safetensors"}}))
    with pytest.raises(InputError, match="a link to a file outside the model directory"):
        load_architecture(str(path))


def test_a_hub_snapshot_links_into_its_own_blobs(tmp_path: Path) -> None:
    """The Hugging Face cache keeps snapshots/REV/x as a link to ../../blobs/HASH: inside the repo, so read."""
    repo = tmp_path / "models--org--tiny"
    snapshot = repo / "snapshots" / "abc"
    snapshot.mkdir(parents=True)
    (repo / "blobs").mkdir()
    (snapshot / "config.json").write_text(json.dumps(TINY))
    blob = repo / "blobs" / "0123"
    blob.write_bytes(header_bytes({"t": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, 8))
    (snapshot / "model-00001.safetensors").symlink_to("../../blobs/0123")
    (snapshot / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"t": "model-00001.safetensors"}}))
    info = read_safetensors_headers(ModelLocation(ref="org/tiny", path=snapshot, repo_id="org/tiny"))
    assert info is not None and [t.name for t in info.tensors] == ["t"]


@pytest.mark.parametrize("special", ["fifo", "dir", "loop"])
def test_special_files_in_a_model_directory_are_refused_at_once(tmp_path: Path, special: str) -> None:
    path = model_dir(tmp_path)
    shard = path / "model.safetensors"
    if special == "fifo":
        os.mkfifo(shard)
    elif special == "dir":
        shard.mkdir()
    else:
        shard.symlink_to(shard)
    with pytest.raises(InputError, match=r"safetensors file must be a regular file|is a directory|links loop"):
        load_architecture(str(path))
