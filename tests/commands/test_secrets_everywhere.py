"""Secrets planted in every input never come out (issue 26, items 1-4, 7 and its closing check).

Every input that can carry a secret gets one: the recipe's `env` (HF_TOKEN, *_API_KEY, *_TOKEN, *_SECRET,
*PASSWORD*, a proxy URL with credentials), its `engine_args`, the engine flags after `--` (vLLM's
multi-value --api-key, the `=` form, an abbreviation and a misspelling of a secret flag), the process
environment, and the model's config.json (a hub URL with credentials, a token-named key). Control characters
(terminal escape sequences) go in beside them. Then every output path of validate, start, recipes and render is
run, and all of stdout and stderr is searched: no planted value and no raw control character may be there.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from dspark.cli import main

ROOT = Path(__file__).resolve().parents[2]
RECIPES = ROOT / "dspark" / "data" / "recipes"

ENV_SECRETS = {
    "HF_TOKEN": "hf_planted_env_a1",
    "OPENAI_API_KEY": "sk-planted-env-a2",
    "WANDB_TOKEN": "planted-env-a3",
    "MY_SERVICE_SECRET": "planted-env-a4",
    "PASSWORD_FOR_THE_DB": "planted-env-a5",
}
PROXY_USER, PROXY_PASSWORD = "planted-user-b1", "planted-pw-b2"
ARG_KEYS = ("sk-planted-arg-c1", "sk-planted-arg-c2")
FLAG_KEYS = ("sk-planted-flag-d1", "sk-planted-flag-d2")
FLAG_TOKEN = "hf_planted_flag_d3"  # noqa: S105 - planted, to be searched for
ABBREV_KEY = "sk-planted-abbrev-d4"
MISSPELT_KEY = "sk-planted-misspelt-d5"
PROCESS_TOKEN = "hf_planted_process_e1"  # noqa: S105 - planted, to be searched for
CONFIG_SECRETS = ("planted-config-f1", "planted-config-f2", "hf_planted_config_f3")
ESCAPES = "\x1b]0;planted-title\x07\x1b[2J\x9b31m"
PLANTED = (*ENV_SECRETS.values(), PROXY_USER, PROXY_PASSWORD, *ARG_KEYS, *FLAG_KEYS, FLAG_TOKEN, ABBREV_KEY,
           MISSPELT_KEY, PROCESS_TOKEN, *CONFIG_SECRETS)
ENGINE_FLAGS = ["--", "--api-key", *FLAG_KEYS, f"--hf-token={FLAG_TOKEN}", "--api-ke", ABBREV_KEY,
                "--apikye", MISSPELT_KEY]


def _yaml_escaped(text: str) -> str:
    return json.dumps(text)  # a JSON string is a YAML double-quoted scalar: the escapes stay escapes


@pytest.fixture
def inputs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Path]]:
    for name in list(os.environ):
        if name.startswith(("DSPARK_", "LWS_")) or name == "MAX_NUM_SEQS":
            monkeypatch.delenv(name)
    monkeypatch.setenv("HF_TOKEN", PROCESS_TOKEN)
    # No engine here, whatever another test left importable: start's dry run prints its plan unchecked.
    monkeypatch.setenv("DSPARK_ENGINE_PYTHON", str(tmp_path / "no-engine" / "python"))
    env = {**ENV_SECRETS, "HTTPS_PROXY": f"http://{PROXY_USER}:{PROXY_PASSWORD}@proxy.example:3128",
           "NCCL_DEBUG": f"WARN{ESCAPES}"}
    recipe = tmp_path / "planted.yaml"
    text = (RECIPES / "flash-next-vllm.yaml").read_text().replace("name: flash-next-vllm", "name: planted")
    text = re.sub(r"description: >-\n(?:  .*\n)+", lambda _m: f"description: {_yaml_escaped(ESCAPES + ' x')}\n", text)
    text = text.replace("  served_name: flash-next\n", f"  served_name: {_yaml_escaped('flash' + ESCAPES)}\n")
    recipe.write_text(
        f"# {ENV_SECRETS['HF_TOKEN']} in a comment\n{text}"
        + "env:\n" + "".join(f"  {k}: {_yaml_escaped(v)}\n" for k, v in env.items())
        + f"engine_args: [--api-key, {', '.join(ARG_KEYS)}]\n")
    model = tmp_path / "model"
    model.mkdir()
    config = json.loads((ROOT / "tests" / "fixtures" / "configs" / "qwen3-32b.json").read_text())
    config["_name_or_path"] = f"https://{CONFIG_SECRETS[0]}:{CONFIG_SECRETS[1]}@hub.example/org/model"
    config["hf_token"] = CONFIG_SECRETS[2]
    (model / "config.json").write_text(json.dumps(config))
    bad_model = tmp_path / "bad-model"
    bad_model.mkdir()
    (bad_model / "config.json").write_text(json.dumps({**config, "model_type": f"evil{ESCAPES}",
                                                       "architectures": [f"Evil{ESCAPES}"]}))
    yield {"recipe": recipe, "model": model, "bad_model": bad_model, "tmp": tmp_path}


def _leaks(text: str) -> list[str]:
    found = [s for s in PLANTED if s in text]
    found += [f"control character {c!r}" for c in sorted(set(text)) if (ord(c) < 32 and c not in "\n\t")
              or 0x7F <= ord(c) <= 0x9F]
    return found


def _run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    try:
        rc = main(args)
    except SystemExit as exc:  # pragma: no cover - main returns its code
        rc = int(exc.code or 0)
    out, err = capsys.readouterr()
    return rc, out + err


def _commands(inputs: dict[str, Path]) -> dict[str, list[str]]:
    recipe, model = str(inputs["recipe"]), str(inputs["model"])
    flags = ENGINE_FLAGS
    return {
        "validate": ["validate", recipe, *flags],
        "validate --json": ["validate", recipe, "--json", *flags],
        "validate --explain": ["validate", recipe, "--explain", *flags],
        "validate --model (config.json)": ["validate", "--model", model, "--hardware", "h200", "--explain", *flags],
        "start --dry-run": ["start", recipe, "--dry-run", "--explain", *flags],
        "start --dry-run --json": ["start", recipe, "--dry-run", "--json", *flags],
        "recipes show": ["recipes", "show", recipe],
        "recipes show --json": ["recipes", "show", recipe, "--json"],
        "render k8s": ["render", "k8s", recipe, "--image", "i", "--explain", *flags],
        "render k8s --json": ["render", "k8s", recipe, "--image", "i", "--json", *flags],
        "render k8s --model": ["render", "k8s", "--model", model, "--hardware", "h200", "--image", "i", *flags],
        # Error paths: a plan that does not fit, a bad engine flag value, a model config dspark cannot read.
        "error: refused": ["validate", recipe, "--kv-cache-memory", "900GiB", *flags],
        "error: render refused": ["render", "k8s", recipe, "--image", "i", "--kv-cache-memory", "900GiB", *flags],
        "error: bad flag value": ["validate", recipe, *flags, "--max-model-len", f"x{FLAG_KEYS[0]}"],
        "error: config.json": ["validate", "--model", str(inputs["bad_model"]), "--hardware", "h200", *flags],
        "error: --json": ["validate", "--model", str(inputs["bad_model"]), "--json", *flags],
    }


def test_no_planted_secret_or_control_character_reaches_any_output(
    inputs: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    results = {name: _run(args, capsys) for name, args in _commands(inputs).items()}
    leaks = {name: _leaks(text) for name, (_, text) in results.items() if _leaks(text)}
    assert leaks == {}
    # The runs did what they say (a leak check of runs that printed nothing would prove nothing).
    codes = {name: rc for name, (rc, _) in results.items()}
    assert {n: c for n, c in codes.items() if not n.startswith("error")} == {
        n: 0 for n in codes if not n.startswith("error")} | {"start --dry-run": 2, "start --dry-run --json": 2}
    assert {n: c for n, c in codes.items() if n.startswith("error")} == {
        "error: refused": 1, "error: render refused": 1, "error: bad flag value": 2, "error: config.json": 2,
        "error: --json": 2}
    assert "--api-key '***' '***'" in results["start --dry-run"][1]
    assert "secretKeyRef" in results["render k8s"][1]
    assert "HTTPS_PROXY: \"http://***@proxy.example:3128\"" in results["recipes show"][1]
    assert "\\u001b]0;planted-title" in results["recipes show"][1]  # as the file writes it: text, not a command


def test_the_search_finds_what_it_looks_for() -> None:
    """The grep above can fail: each planted value and a raw escape are found when present."""
    for value in PLANTED:
        assert _leaks(f"text {value} text") == [value]
    assert _leaks(f"a{ESCAPES}b") != []
    assert _leaks("--api-key '***' \\x1b[2J") == []


@pytest.mark.engine
def test_the_engines_own_rejection_is_printed_without_the_keys_it_echoes(
    vllm_python: str, inputs: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """vLLM's parser echoes what it rejects (`unrecognized arguments: --apikey sk-...`): the dry run's "would
    refuse" line and the real start's error say which flag, never the key (issue 26, item 3)."""
    engine = ["--master-addr", "10.0.0.1", "--engine-python", vllm_python, "--", "--apikey", *FLAG_KEYS,
              "--hf-tokn", FLAG_TOKEN]
    rc, dry = _run(["start", "flash-next-vllm", "--dry-run", *engine], capsys)
    assert rc == 2
    assert "rejects this argv: vllm serve: error: unrecognized arguments: --apikey *** *** --hf-tokn ***" in dry
    rc, real = _run(["start", "flash-next-vllm", "--hardware", "gb10x2", *engine], capsys)
    assert rc == 2
    assert "error: the installed vllm 0.32.0 rejects this argv" in real and "--apikey *** ***" in real
    assert {"dry run": _leaks(dry), "start": _leaks(real)} == {"dry run": [], "start": []}
