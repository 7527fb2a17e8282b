"""Server URLs: credentials go into an Authorization header and are never shown; bad URLs are exit 2."""

from __future__ import annotations

import base64
import json
import sys
from pathlib import Path

import pytest

from dspark.bench.url import parse_server_url, redact_url_credentials
from dspark.cli import main
from dspark.core.errors import InputError
from tests.bench.fake_server import FakeServer
from tests.bench.helpers import free_port, in_thread

ARGS = ["--requests", "2", "--concurrency", "1", "--max-tokens", "2", "--input-len", "4", "--no-progress",
        "--sample-interval", "0.05"]


def test_credentials_are_split_off_into_basic_auth() -> None:
    got = parse_server_url("http://alice:s3cr%40t@127.0.0.1:8000/v1")
    assert got.url == "http://127.0.0.1:8000/v1"
    assert got.authorization == "Basic " + base64.b64encode(b"alice:s3cr@t").decode()
    assert parse_server_url("https://[::1]:8443").url == "https://[::1]:8443"
    assert parse_server_url("http://h").authorization is None
    assert redact_url_credentials("--url=http://u:pw@h:1 and https://tok@x/y") == "--url=http://***@h:1 and https://***@x/y"


@pytest.mark.parametrize("url", ["http://[::1", "http://127.0.0.1:99999", "http://127.0.0.1:0", "http://h:abc",
                                 "http://h\r\nX-Evil: 1", "http://h\n", "http://h:1\t", "ftp://h:1", "http://",
                                 "127.0.0.1:8000", "http://h:1/?q=1", "http://h a:1", ""])
def test_bad_urls_are_input_errors(url: str) -> None:
    with pytest.raises(InputError, match=r"^--url "):
        parse_server_url(url)


@pytest.mark.parametrize("url", ["http://[::1", "http://127.0.0.1:99999", "http://h\r\nX-Evil: 1",
                                 "http://u:hunter2@[::1"])
def test_bad_urls_exit_2_without_a_traceback(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--url", url, *ARGS]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --url ") and "Traceback" not in err
    assert "hunter2" not in err


@pytest.mark.parametrize(("flag", "value"), [("--timeout", "nan"), ("--timeout", "inf"), ("--timeout", "-1"),
                                             ("--sample-interval", "nan"), ("--sample-interval", "0")])
def test_non_finite_seconds_exit_2(flag: str, value: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--url", f"http://127.0.0.1:{free_port()}", *ARGS, flag, value]) == 2
    assert f"{flag} must be a positive finite number, got" in capsys.readouterr().err


def test_url_credentials_are_sent_as_basic_auth_and_never_shown(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 26 item 5: the password was printed (table, JSON) and sent as `Host: alice:pw@...`."""
    out = tmp_path / "r.json"
    with in_thread(FakeServer()) as srv:
        url = srv.url.replace("http://", "http://alice:pw-Zq81x@")
        argv = ["bench", "--url", url, *ARGS, "--out", str(out)]
        monkeypatch.setattr(sys, "argv", ["dspark", *argv])  # recorded in the JSON's metadata
        assert main(argv) == 0
        table = capsys.readouterr()
        assert main(["bench", "--url", url, *ARGS, "--json"]) == 0
        document = capsys.readouterr()
        heads = srv.state.heads
    for text in (table.out, table.err, document.out, document.err, out.read_text()):
        assert "pw-Zq81x" not in text
    assert json.loads(document.out)["url"] == srv.url
    posts = [h for h in heads if h["_path"] == "/v1/completions"]
    assert posts and all(h["host"] == srv.url.removeprefix("http://") for h in posts)
    assert all(h["authorization"] == "Basic " + base64.b64encode(b"alice:pw-Zq81x").decode() for h in heads)
    assert "http://***@" in " ".join(json.loads(out.read_text())["metadata"]["argv"])
