"""The env server's settings (``ragen serve``'s flags); no web dependency, so the CLI parses without it."""

from __future__ import annotations

import os
from dataclasses import dataclass
from urllib.parse import urlsplit

from ragen_envs.base import check_positive_int, declared
from ragen_envs.registry import ENVIRONMENTS, env_for

TOKEN_VARIABLE = "RAGEN_SERVE_TOKEN"


@dataclass
class ServerConfig:
    envs: list[str] = declared(factory=lambda: [env_for("default")], help="env ids served; the first is /ws's")
    host: str = declared("127.0.0.1", help="bind address; \"0.0.0.0\" opens the server to the network")
    port: int = declared(8000, help="0: any free port")
    max_sessions: int = declared(1024, help="sessions open at once; one more is refused (503, \"capacity\")")
    idle_timeout_s: float = declared(600.0, help="a session unused this long is closed, its env too")
    max_request_bytes: int = declared(1 << 20, help="larger request bodies and WebSocket messages are refused (413)")
    token: str | None = declared(None, help="shared secret: clients send \"Authorization: Bearer TOKEN\"; default: "
                                 "$RAGEN_SERVE_TOKEN, else none")
    env_kwargs: dict = declared(factory=dict, help="JSON {env_id: {gym.make arguments}} fixed by the server")
    workers: int = declared(64, help="threads running env calls (resets, steps), per served env: a slow env queues "
                            "behind itself only")
    read_timeout_s: float = declared(30.0, help="a request's headers and body must arrive whole within this many "
                                     "seconds of its first byte (a new connection's: of its opening), however "
                                     "steadily they trickle, or it is disconnected (slowloris); the idle time between "
                                     "two requests of a kept-alive connection is not counted")
    max_connections: int = declared(2048, help="connections open at once (WebSockets included); one more gets 503 "
                                    "and is closed at once. Fewer where the process's open-file limit would run out "
                                    "first, so /health and the envs always have descriptors")
    allowed_hosts: tuple[str, ...] = declared((), help="Host header names answered besides localhost, the bind host "
                                              "and, bound to all interfaces, this machine's name; IP addresses always "
                                              "pass (DNS rebinding needs a name); \"*\": any; others get 403")
    allowed_origins: tuple[str, ...] = declared((), help="browser pages (Origin header) allowed besides those of an "
                                                "answered host name: \"https://app:3000\" or a host name; \"*\": "
                                                "any; requests without Origin (not from a browser) always pass")
    oracle: bool = declared(False, help="hand out the envs' oracle (call/oracle_action, call/oracle_reasoning) to "
                            "clients: only where every client is trusted (a warm start, an audit); an agent that "
                            "reached it would read the answers off it")

    def __post_init__(self):
        if not self.envs:
            raise ValueError("serve at least one env (--env ID)")
        for env_id in self.envs:
            if env_id not in ENVIRONMENTS:
                raise ValueError(f"unknown env {env_id!r}; `ragen list` shows the catalogue")
        for name in ("max_sessions", "max_request_bytes", "workers", "max_connections"):
            check_positive_int(name, getattr(self, name))
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port must be in 0..65535, got {self.port}")
        for name in ("idle_timeout_s", "read_timeout_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        unknown = set(self.env_kwargs) - set(self.envs)
        if unknown:
            raise ValueError(f"env_kwargs names envs that are not served: {sorted(unknown)}")
        self.allowed_hosts = tuple(host_name(h) or h for h in self.allowed_hosts)  # "[::1]:80" -> "::1"
        self.allowed_origins = tuple(o.lower().rstrip("/") for o in self.allowed_origins)
        if self.token is None:
            self.token = os.environ.get(TOKEN_VARIABLE) or None


def host_name(netloc: str) -> str | None:
    """The host of a Host header or an origin's netloc, lower case: "[::1]:8000" -> "::1"; None if malformed."""
    try:
        name = urlsplit("//" + netloc).hostname
    except ValueError:  # "[::1" and the like
        return None
    return name.rstrip(".") if name else None
