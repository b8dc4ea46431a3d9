"""Fixtures of the storage tests."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pytest
import redis


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _free_cluster_port() -> int:
    """A free port whose cluster bus port (port + 10000) is a valid, free port too: Redis
    exits at start-up otherwise."""
    while True:
        port = _free_port()
        if port + 10000 > 65535:
            continue
        with socket.socket() as bus:
            try:
                bus.bind(("127.0.0.1", port + 10000))
            except OSError:
                continue
        return port


@contextmanager
def _redis_server(port: int, *options: str, what: str) -> Iterator[redis.Redis]:
    """A throwaway ``redis-server`` on ``port`` with ``options``, and a client of it."""
    server = shutil.which("redis-server")
    if server is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"redis-server is not installed: CI must run the {what} tests")
        pytest.skip("redis-server is not installed")
    proc = subprocess.Popen(
        [server, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         *options],
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    client = redis.Redis(port=port, socket_connect_timeout=1)
    try:
        for _ in range(100):
            if proc.poll() is not None:
                pytest.fail(f"the {what} Redis exited at start-up (code {proc.returncode})")
            try:
                client.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.05)
        yield client
    finally:
        client.close()
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture(scope="session")
def cluster_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A throwaway single-node Redis Cluster: it serves every slot, and so refuses any script
    whose keys span two slots (CROSSSLOT), as a real cluster would."""
    port, workdir = _free_cluster_port(), tmp_path_factory.mktemp("cluster")
    with _redis_server(
        port, "--cluster-enabled", "yes", "--cluster-config-file", str(workdir / "nodes.conf"),
        "--dir", str(workdir), what="Cluster",
    ) as client:  # fmt: skip
        client.execute_command("CLUSTER", "ADDSLOTSRANGE", 0, 16383)
        while b"cluster_state:ok" not in client.execute_command("CLUSTER", "INFO"):
            time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}/0"


@dataclass(frozen=True)
class PrivateRedis:
    """A throwaway Redis reachable over TLS, a Unix socket and a user with a password."""

    tls_url: str
    unix_url: str
    user_url: str


@pytest.fixture(scope="session")
def private_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateRedis]:
    openssl = shutil.which("openssl")
    if openssl is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("openssl is not installed: CI must run the TLS tests")
        pytest.skip("openssl is not installed")
    workdir = tmp_path_factory.mktemp("private-redis")
    cert, key = workdir / "cert.pem", workdir / "key.pem"
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
         "-keyout", str(key), "-out", str(cert), "-subj", "/CN=localhost",
         "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
        check=True, capture_output=True,
    )  # fmt: skip
    plain, tls, sock = _free_port(), _free_port(), workdir / "redis.sock"
    with _redis_server(
        plain, "--tls-port", str(tls), "--tls-cert-file", str(cert), "--tls-key-file", str(key),
        "--tls-ca-cert-file", str(cert), "--tls-auth-clients", "no", "--unixsocket", str(sock),
        "--dir", str(workdir), what="TLS",
    ) as client:  # fmt: skip
        client.acl_setuser("gk", enabled=True, passwords=["+s3cret-pw"], keys=["*"],
                           commands=["+@all"])  # fmt: skip
        yield PrivateRedis(
            tls_url=f"rediss://localhost:{tls}/2?ssl_ca_certs={cert}",
            unix_url=f"unix://{sock}?db=3",
            user_url=f"redis://gk:s3cret-pw@127.0.0.1:{plain}/4",
        )
