"""The rendezvous store listens on the address it is given: with 127.0.0.1 (one machine) on loopback only, where
``torch.distributed.TCPStore`` alone listens on every interface; process groups built on it work."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from vla_infra.fsdp import spawn_local_group
from vla_infra.rendezvous import tcp_store

pytestmark = pytest.mark.skipif(
    not Path("/proc/net/tcp").exists(), reason="reads listening sockets from /proc"
)


def listening_addresses(port: int) -> set[str]:
    """Local addresses (hex, as /proc/net/tcp{,6} writes them) of the sockets listening on `port`."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        if not Path(table).exists():
            continue
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            address, hex_port = fields[1].rsplit(":", 1)
            if fields[3] == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
                found.add(address)
    return found


LOOPBACK = "0100007F"  # 127.0.0.1, little-endian hex


def test_the_store_listens_on_loopback_only() -> None:
    store = tcp_store("127.0.0.1", 0, 1, is_master=True)
    store.set("k", "v")
    assert store.get("k") == b"v"
    assert listening_addresses(store.port) == {LOOPBACK}


def test_torch_alone_listens_on_every_interface() -> None:
    """What `tcp_store` avoids: the plain store, given 127.0.0.1, listens on the wildcard address."""
    store = dist.TCPStore("127.0.0.1", 0, 1, True, wait_for_workers=False)
    addresses = listening_addresses(store.port)
    assert addresses and LOOPBACK not in addresses
    assert all(set(a) == {"0"} for a in addresses)  # 0.0.0.0 or ::


def test_a_taken_port_is_an_error() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        with pytest.raises(OSError):
            tcp_store("127.0.0.1", taken.getsockname()[1], 1, is_master=True)


def _all_reduce_and_report(rank: int, world_size: int, out: str) -> None:
    import os

    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t)
    port = int(os.environ["MASTER_PORT"])
    if rank == 0:
        Path(out).write_text(f"{float(t)} {','.join(sorted(listening_addresses(port)))}")


def test_a_local_group_rendezvous_on_loopback(tmp_path: Path) -> None:
    out = tmp_path / "result.txt"
    spawn_local_group(_all_reduce_and_report, world_size=2, args=(str(out),))
    total, addresses = out.read_text().split(" ")
    assert float(total) == 3.0 and addresses == LOOPBACK
