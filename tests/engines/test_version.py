"""Which engine version the figures model: flag > env > installed > newest modelled; unmodelled ones are said."""

from __future__ import annotations

import pytest

from dspark.core.errors import InputError
from dspark.engines import engine_spec
from dspark.engines.version import nearest_modelled, normalize, resolve_engine_version, version_key

VLLM = ("0.32.0", "0.33.0")


def test_precedence_flag_env_installed_default() -> None:
    env = {"DSPARK_ENGINE_VERSION": "0.32.0"}
    assert resolve_engine_version("vllm", VLLM, flag="0.33.0", env=env, installed="0.32.0").source == "flag"
    from_env = resolve_engine_version("vllm", VLLM, flag=None, env=env, installed="0.33.0")
    assert (from_env.source, from_env.requested, from_env.installed) == ("env", "0.32.0", "0.33.0")
    installed = resolve_engine_version("vllm", VLLM, flag=None, env={}, installed="0.32.0")
    assert (installed.source, installed.modelled, installed.exact) == ("installed", "0.32.0", True)
    default = resolve_engine_version("vllm", VLLM, flag=None, env={}, installed=None)
    assert default.to_json() == {"modelled": "0.33.0", "installed": None, "requested": "0.33.0", "source": "default"}


def test_unmodelled_versions_use_the_nearest_modelled_and_say_so() -> None:
    newer = resolve_engine_version("vllm", VLLM, flag="0.34.0", env={}, installed=None)
    assert (newer.modelled, newer.exact) == ("0.33.0", False)
    assert newer.label() == "0.34.0 (computed as 0.33.0: not modelled)"
    older = resolve_engine_version("sglang", ("0.5.23",), flag=None, env={}, installed="0.5.10")
    assert (older.requested, older.modelled, older.source) == ("0.5.10", "0.5.23", "installed")
    assert nearest_modelled("0.32.5", VLLM) == "0.32.0"
    assert nearest_modelled("0.31.0", VLLM) == "0.32.0"


def test_local_versions_and_suffixes_are_normalized() -> None:
    assert normalize("0.32.0+cpu") == "0.32.0"
    assert normalize("v0.33") == "0.33.0"
    assert version_key("0.10.2rc1") == (0, 10, 2)
    assert normalize("abc") is None


@pytest.mark.parametrize("where", ["flag", "env"])
def test_a_value_that_is_not_a_version_is_an_input_error_listing_the_modelled(where: str) -> None:
    flag = "abc" if where == "flag" else None
    env = {"DSPARK_ENGINE_VERSION": "abc"} if where == "env" else {}
    with pytest.raises(InputError) as err:
        resolve_engine_version("vllm", VLLM, flag=flag, env=env, installed=None)
    assert err.value.exit_code == 2
    assert "0.32.0, 0.33.0" in (err.value.hint or "")


def test_an_unmodelled_release_the_matrix_compared_is_planned_as_that_release() -> None:
    with_025 = ("0.25.0", "0.32.0", "0.33.0")
    # 0.28-0.31: the version matrix compared them with 0.32.0 (docs/version-matrix.md), not the older 0.25.0.
    assert resolve_engine_version("vllm", with_025, flag="0.30.0", env={}, installed=None).modelled == "0.32.0"
    assert resolve_engine_version("vllm", with_025, flag=None, env={}, installed="0.28.0").modelled == "0.32.0"
    # A release the matrix did not run: the newest modelled one not above it.
    unrun = resolve_engine_version("vllm", with_025, flag="0.27.0", env={}, installed=None)
    assert (unrun.modelled, unrun.exact) == ("0.25.0", False)
    assert resolve_engine_version("vllm", with_025, flag="0.25.0", env={}, installed=None).exact


@pytest.mark.parametrize(("requested", "modelled"), [("0.25.0", "0.25.0"), ("0.26.0", "0.26.0"),
                                                     ("0.27.0", "0.26.0"), ("0.27.1", "0.26.0")])
def test_vllm_026_is_modelled_and_027_is_planned_as_it(requested: str, modelled: str) -> None:
    """The registry's vLLM releases: 0.26.0 is its own entry, not the nearest older one; 0.27 (not modelled: its
    budget accounting is 0.32's) is planned as 0.26.0 and said so."""
    got = resolve_engine_version("vllm", engine_spec("vllm").modelled_versions, flag=requested, env={},
                                 installed=None)
    assert (got.modelled, got.exact) == (modelled, requested == modelled)
