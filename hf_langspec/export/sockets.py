"""The socket `hf-langspec serve` listens on, and the checks the command line makes before a model is loaded."""

from __future__ import annotations

import socket


def _cannot_listen(host: str, port: int, err: OSError) -> ValueError:
    return ValueError(f"cannot listen on {host}:{port}: {err.strerror}; choose another --port / --host")


def port_problem(port: int) -> str | None:
    """Why `port` cannot be listened on whatever the machine (the CLI's argument check and the server share it)."""
    return None if 0 <= port <= 65535 else f"port {port} is not a TCP port; give one in 1-65535 (0: any free one)"


def check_port_free(host: str, port: int) -> None:
    """Refuse a host and port this machine cannot listen on, before anything expensive (a model) is loaded."""
    listening_socket(host, port, listen=False).close()


def listening_socket(host: str, port: int, listen: bool = True) -> socket.socket:
    """A socket bound to `host:port` (port 0: a free one), listening: connections wait in its backlog until the
    server takes them, so a client may connect as soon as this returns."""
    problem = port_problem(port)
    if problem:
        raise ValueError(f"{problem}.")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a restarted server gets its port back at once
    try:
        sock.bind((host, port))
        if listen:
            sock.listen(2048)
    except OSError as err:  # the port is taken, or the host is not this machine's
        sock.close()
        raise _cannot_listen(host, port, err) from None
    return sock


__all__ = ["check_port_free", "listening_socket", "port_problem"]
