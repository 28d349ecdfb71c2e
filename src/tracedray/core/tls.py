"""Optional TLS for every connection of a cluster (gRPC and the task stream).

On when ``TRACEDRAY_TLS_CERT`` and ``TRACEDRAY_TLS_KEY`` name this node's PEM
certificate and key. With ``TRACEDRAY_TLS_CA`` it is mutual: servers require a
client certificate signed by that CA, and clients check servers against it
(without it, against the system's roots). Peers are reached by IP, so a node's
certificate must name its IP (subjectAltName IP:...). The token is still checked
on top: TLS keeps it and the data private on the wire.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import grpc

from tracedray import config
from tracedray.exceptions import ConfigError


@dataclass(frozen=True)
class TlsFiles:
    cert: Path
    key: Path
    ca: Path | None

    def read(self) -> tuple[bytes, bytes, bytes | None]:
        return (self.cert.read_bytes(), self.key.read_bytes(),
                self.ca.read_bytes() if self.ca is not None else None)


def from_config() -> TlsFiles | None:
    cert, key, ca = config.TLS_CERT.get(), config.TLS_KEY.get(), config.TLS_CA.get()
    return choose(cert, key, ca)


def choose(cert: Path | None, key: Path | None, ca: Path | None) -> TlsFiles | None:
    """TLS files from the three settings, or ConfigError for an incomplete set."""
    if cert is None and key is None:
        if ca is not None:
            raise ConfigError(f"{config.TLS_CA.name} is set without {config.TLS_CERT.name} "
                              f"and {config.TLS_KEY.name}: give all three for mutual TLS")
        return None
    if cert is None or key is None:
        raise ConfigError(f"give both {config.TLS_CERT.name} and {config.TLS_KEY.name} "
                          "(this node's certificate and its private key), or neither")
    return TlsFiles(cert, key, ca)


@lru_cache(maxsize=4)
def server_credentials(files: TlsFiles) -> grpc.ServerCredentials:
    cert, key, ca = files.read()
    return grpc.ssl_server_credentials([(key, cert)], root_certificates=ca,
                                       require_client_auth=ca is not None)


@lru_cache(maxsize=4)
def channel_credentials(files: TlsFiles) -> grpc.ChannelCredentials:
    cert, key, ca = files.read()
    return grpc.ssl_channel_credentials(root_certificates=ca, private_key=key,
                                        certificate_chain=cert)


# The task stream reads on one thread and writes on another; an SSL object is not
# meant to be shared like that. TLS 1.2 without renegotiation keeps the two apart
# after the handshake (1.3 may answer a key update from inside a read), so the
# stream pins it. A caller ends its stream by a TCP half-close (it still reads its
# results), so an end without close_notify is a normal end (OP_IGNORE_UNEXPECTED_EOF;
# the framing catches a stream cut inside a frame). gRPC (its own TLS) is not affected.
@lru_cache(maxsize=4)
def stream_server_context(files: TlsFiles) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.maximum_version = ssl.TLSVersion.TLSv1_2
    context.options |= ssl.OP_NO_RENEGOTIATION | ssl.OP_IGNORE_UNEXPECTED_EOF
    context.load_cert_chain(files.cert, files.key)
    if files.ca is not None:
        context.load_verify_locations(files.ca)
        context.verify_mode = ssl.CERT_REQUIRED
    return context


@lru_cache(maxsize=4)
def stream_client_context(files: TlsFiles) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # checks the peer's name: its IP
    context.maximum_version = ssl.TLSVersion.TLSv1_2
    context.options |= ssl.OP_NO_RENEGOTIATION | ssl.OP_IGNORE_UNEXPECTED_EOF
    context.load_cert_chain(files.cert, files.key)
    if files.ca is not None:
        context.load_verify_locations(files.ca)
    else:
        context.load_default_certs()
    return context
