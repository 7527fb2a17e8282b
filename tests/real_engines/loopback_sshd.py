"""A throwaway sshd on 127.0.0.1 for tests: its own host key, one authorized client key, an ssh_config for it.

`LoopbackSshd.start(dir)` needs /usr/sbin/sshd (openssh-server; scripts/install-engines.sh installs it) and runs
`sshd -D` in the foreground on a free port; `ssh_config` names the host alias `HOST` with the port, the client key
and a known-hosts file of its own (StrictHostKeyChecking accept-new), so nothing in ~/.ssh is read or written.
"""

from __future__ import annotations

import ctypes
import getpass
import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

HOST = "peer-loopback"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when the test's process dies (a killed pytest leaves no sshd behind)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _sshd() -> str:
    found = shutil.which("sshd") or next((p for p in ("/usr/sbin/sshd", "/usr/local/sbin/sshd") if Path(p).exists()),
                                         None)
    if found is None:
        raise RuntimeError("sshd is not installed (apt-get install openssh-server; scripts/test installs it)")
    return found


@dataclass
class LoopbackSshd:
    proc: subprocess.Popen[bytes]
    port: int
    ssh_config: Path
    log: Path

    @classmethod
    def start(cls, root: Path) -> LoopbackSshd:
        root.mkdir(parents=True, exist_ok=True)
        os.chmod(root, 0o700)
        for name in ("host_key", "client_key"):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(root / name)], check=True)
        (root / "authorized_keys").write_bytes((root / "client_key.pub").read_bytes())
        os.chmod(root / "authorized_keys", 0o600)
        port = _free_port()
        config = root / "sshd_config"
        config.write_text(
            f"Port {port}\nListenAddress 127.0.0.1\nHostKey {root / 'host_key'}\nPidFile {root / 'sshd.pid'}\n"
            f"AuthorizedKeysFile {root / 'authorized_keys'}\nPasswordAuthentication no\n"
            "KbdInteractiveAuthentication no\nPubkeyAuthentication yes\nPermitRootLogin prohibit-password\n"
            "StrictModes no\nUsePAM no\nAcceptEnv none\nLogLevel VERBOSE\n"
        )
        log = root / "sshd.log"
        Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege-separation directory
        proc = subprocess.Popen([_sshd(), "-D", "-e", "-f", str(config)], stdout=log.open("wb"),
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                                preexec_fn=_die_with_parent)  # noqa: PLW1509 - only a prctl call
        ssh_config = root / "ssh_config"
        ssh_config.write_text(
            f"Host {HOST}\n  HostName 127.0.0.1\n  Port {port}\n  User {getpass.getuser()}\n"
            f"  IdentityFile {root / 'client_key'}\n  IdentitiesOnly yes\n"
            f"  UserKnownHostsFile {root / 'known_hosts'}\n  StrictHostKeyChecking accept-new\n"
            "  BatchMode yes\n  LogLevel ERROR\n"
        )
        sshd = cls(proc=proc, port=port, ssh_config=ssh_config, log=log)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"sshd exited with {proc.returncode}: {log.read_text()[-2000:]}")
            ok = subprocess.run(["ssh", "-F", str(ssh_config), HOST, "true"], capture_output=True, timeout=20,
                                check=False)
            if ok.returncode == 0:
                return sshd
            time.sleep(0.3)
        sshd.stop()
        raise RuntimeError(f"sshd on 127.0.0.1:{port} did not accept the client key: {log.read_text()[-2000:]}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
