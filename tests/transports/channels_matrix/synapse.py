"""A real Synapse homeserver for the Matrix tests, on loopback, SQLite, in a tmp dir.

Synapse (AGPL-3.0) is a test-only dependency, installed by the Makefile into its own venv
(`.venv-synapse`, so its pins never meet reel's) and never vendored. `REEL_SYNAPSE_PYTHON`
names another interpreter that has it. If it cannot start, the tests that need it fail (they
never skip): the Matrix connector is only as tested as this homeserver is real.

Measured notes: ../shared/reference/matrix-synapse.md (start ~3 s; default rate limits break
tests; matrix-nio sleeps on 429s unless told not to).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[3]
SERVER_NAME = "localhost"
START_TIMEOUT_S = 120.0
UNLIMITED = {"per_second": 10000, "burst_count": 10000}


def synapse_python() -> Path:
    """The interpreter that has Synapse installed."""
    named = os.environ.get("REEL_SYNAPSE_PYTHON")
    return Path(named) if named else REPO / ".venv-synapse" / "bin" / "python"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _config(root: Path, port: int, shared_secret: str) -> dict[str, Any]:
    limits = {
        "rc_message": UNLIMITED,
        "rc_registration": UNLIMITED,
        "rc_login": {
            "address": UNLIMITED,
            "account": UNLIMITED,
            "failed_attempts": UNLIMITED,
        },
        "rc_joins": {"local": UNLIMITED, "remote": UNLIMITED},
        "rc_invites": {"per_room": UNLIMITED, "per_user": UNLIMITED, "per_issuer": UNLIMITED},
        "rc_room_creation": UNLIMITED,
        "rc_admin_redaction": UNLIMITED,
    }
    return {
        "server_name": SERVER_NAME,
        "pid_file": str(root / "homeserver.pid"),
        "listeners": [
            {
                "port": port,
                "bind_addresses": ["127.0.0.1"],
                "type": "http",
                "tls": False,
                "x_forwarded": False,
                "resources": [{"names": ["client"], "compress": False}],
            }
        ],
        "database": {"name": "sqlite3", "args": {"database": str(root / "homeserver.db")}},
        "log_config": str(root / "log.yaml"),
        "media_store_path": str(root / "media"),
        "signing_key_path": str(root / "signing.key"),
        "registration_shared_secret": shared_secret,
        "macaroon_secret_key": secrets.token_hex(16),
        "form_secret": secrets.token_hex(16),
        "report_stats": False,
        "trusted_key_servers": [],
        "suppress_key_server_warning": True,
        "enable_registration": False,
        "presence": {"enabled": False},
        **limits,
    }


_LOG_CONFIG = """version: 1
formatters:
  plain: {format: '%(asctime)s %(levelname)s %(name)s %(message)s'}
handlers:
  file: {class: logging.FileHandler, formatter: plain, filename: LOGFILE}
root: {level: WARNING, handlers: [file]}
disable_existing_loggers: false
"""


@dataclass
class Homeserver:
    """A running Synapse; :meth:`stop` ends it."""

    base_url: str
    shared_secret: str
    process: subprocess.Popen[bytes]
    root: Path
    _admin_token: str = ""

    def user_id(self, localpart: str) -> str:
        return f"@{localpart}:{SERVER_NAME}"

    def register(self, localpart: str, password: str, *, admin: bool = False) -> str:
        """A new user through the shared-secret admin API (no CLI start-up per user)."""
        url = f"{self.base_url}/_synapse/admin/v1/register"
        nonce = _request("GET", url)["nonce"]
        parts = (nonce, localpart, password, "admin" if admin else "notadmin")
        mac = hmac.new(
            self.shared_secret.encode(), "\x00".join(parts).encode(), hashlib.sha1
        ).hexdigest()
        body = {
            "nonce": nonce,
            "username": localpart,
            "password": password,
            "admin": admin,
            "mac": mac,
        }
        return str(_request("POST", url, body)["user_id"])

    def log(self) -> str:
        path = self.root / "homeserver.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def admin_token(self) -> str:
        """An access token of a server admin (registered and logged in on first use)."""
        if not self._admin_token:
            password = secrets.token_hex(12)
            user = self.register(f"admin_{secrets.token_hex(4)}", password, admin=True)
            login = {
                "type": "m.login.password",
                "identifier": {"type": "m.id.user", "user": user},
                "password": password,
            }
            reply = _request("POST", f"{self.base_url}/_matrix/client/v3/login", login)
            self._admin_token = str(reply["access_token"])
        return self._admin_token

    def set_password(self, user_id: str, password: str) -> None:
        """Give ``user_id`` a new password (Synapse's admin API), its devices logged out."""
        url = f"{self.base_url}/_synapse/admin/v1/reset_password/{urllib.parse.quote(user_id)}"
        body = {"new_password": password, "logout_devices": True}
        _request("POST", url, body, token=self.admin_token())

    def override_ratelimit(self, user_id: str, per_second: int, burst: int) -> None:
        """Give ``user_id`` its own message rate limit (Synapse's admin API; whole numbers,
        0 and 0 for none), so one user can be exempt from a limit everyone else meets."""
        url = (
            f"{self.base_url}/_synapse/admin/v1/users/{urllib.parse.quote(user_id)}"
            "/override_ratelimit"
        )
        body = {"messages_per_second": per_second, "burst_count": burst}
        _request("POST", url, body, token=self.admin_token())

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def _request(method: str, url: str, body: Any = None, token: str = "") -> Any:
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def start_homeserver(root: Path, **settings: Any) -> Homeserver:
    """Generate a signing key and a config in ``root``, start Synapse, wait until it answers.
    ``settings`` replace keys of the config (``rc_message={...}``: a real rate limit)."""
    python = synapse_python()
    if not python.exists():
        raise RuntimeError(
            f"no Synapse interpreter at {python}: run `make test` (it installs matrix-synapse "
            "into .venv-synapse) or set REEL_SYNAPSE_PYTHON"
        )
    root.mkdir(parents=True, exist_ok=True)
    (root / "media").mkdir(exist_ok=True)
    port = _free_port()
    shared_secret = secrets.token_hex(16)
    config = root / "homeserver.yaml"
    # JSON is YAML: no YAML library needed on this side.
    config.write_text(json.dumps({**_config(root, port, shared_secret), **settings}, indent=2))
    (root / "log.yaml").write_text(_LOG_CONFIG.replace("LOGFILE", str(root / "homeserver.log")))
    subprocess.run(
        [str(python), "-m", "synapse.app.homeserver", "-c", str(config), "--generate-keys"],
        check=True,
        capture_output=True,
        timeout=120,
    )
    server = Homeserver(f"http://127.0.0.1:{port}", shared_secret, _launch(root), root)
    _wait_until_up(server)
    return server


def _launch(root: Path) -> subprocess.Popen[bytes]:
    config = root / "homeserver.yaml"
    with open(root / "stderr.log", "ab") as stderr:  # the child keeps its own copy
        return subprocess.Popen(
            [str(synapse_python()), "-m", "synapse.app.homeserver", "-c", str(config)],
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            start_new_session=True,
        )


def _wait_until_up(server: Homeserver) -> None:
    process, root = server.process, server.root
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            err = (root / "stderr.log").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"Synapse exited with {process.returncode}: {err}{server.log()}")
        try:
            _request("GET", f"{server.base_url}/_matrix/client/versions")
            return
        except (urllib.error.URLError, ConnectionError, OSError):
            time.sleep(0.2)
    server.stop()
    raise RuntimeError(f"Synapse did not answer within {START_TIMEOUT_S:.0f} s: {server.log()}")
