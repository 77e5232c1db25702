"""The ``torch.distributed`` rendezvous store, listening only on the address it is given.

``torch.distributed.TCPStore`` as a server listens on every interface of the machine, unauthenticated, whatever
host it is given. :func:`tcp_store` binds the server's socket to ``host`` itself and hands it to the store, so
``MASTER_ADDR=127.0.0.1`` (one machine) keeps the store on loopback; across nodes ``host`` is rank 0's node
address (the placement's node), and the store listens on that interface only.
"""

from __future__ import annotations

import socket
from datetime import timedelta

import torch.distributed as dist

__all__ = ["tcp_store"]


def tcp_store(
    host: str, port: int, world_size: int, *, is_master: bool, timeout: timedelta = timedelta(seconds=600)
) -> dist.TCPStore:
    """A ``TCPStore`` at ``host:port``; the server (``is_master``) listens on ``host``'s interface only.

    Args:
        host: the rendezvous address (``MASTER_ADDR``): a loopback address on one machine, rank 0's node address
            across nodes.
        port: the rendezvous port (``MASTER_PORT``); 0 picks a free one (read it from ``store.port``).
        world_size: processes that join.
        is_master: this process runs the server (rank 0).
        timeout: how long to wait for the others.
    """
    if not is_master:
        return dist.TCPStore(host, port, world_size, False, timeout)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    addr = socket.getaddrinfo(host, port, family, socket.SOCK_STREAM)[0][4]
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(addr)
        sock.listen(max(128, world_size))
        bound_port = sock.getsockname()[1]
        store = dist.TCPStore(
            host,
            bound_port,
            world_size,
            True,
            timeout,
            wait_for_workers=False,
            master_listen_fd=sock.fileno(),
            use_libuv=False,  # the store's own server takes a listening socket only without libuv
        )
    except BaseException:
        sock.close()
        raise
    sock.detach()  # the store's server owns the socket now
    return store
