"""A throw-away certificate authority for tests, made with the ``openssl`` command line.

``Pki(directory)`` creates a CA; ``server()`` and ``client(subject)`` issue EC P-256 certificates
signed by it (the server's for ``localhost`` and ``127.0.0.1``). Files are PEM. Nothing is checked in:
every test session makes its own. Integration tests import this module as ``unit.security.pki``.
"""

from __future__ import annotations

import pathlib
import shutil
import subprocess
from dataclasses import dataclass

import pytest


def _openssl(*args: str, cwd: pathlib.Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@dataclass(frozen=True)
class Issued:
    cert: pathlib.Path
    key: pathlib.Path
    bundle: pathlib.Path  # certificate then key, the PEM "keystore" form ssl.keystore.location wants


class Pki:
    def __init__(self, directory: pathlib.Path, name: str = "tidelog test CA") -> None:
        if shutil.which("openssl") is None:
            pytest.fail("the openssl command is needed to make test certificates")
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        self.ca_cert = self.dir / "ca.pem"
        self.ca_key = self.dir / "ca.key"
        _openssl(
            "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", str(self.ca_key), "-out", str(self.ca_cert), "-days", "2", "-subj", f"/CN={name}",
            cwd=self.dir,
        )

    def _issue(self, stem: str, subject: str, extensions: str) -> Issued:
        key, csr, cert = (self.dir / f"{stem}.{ext}" for ext in ("key", "csr", "pem"))
        ext_file = self.dir / f"{stem}.ext"
        ext_file.write_text(extensions)
        _openssl(
            "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", str(key), "-out", str(csr), "-subj", subject, cwd=self.dir,
        )
        _openssl(
            "x509", "-req", "-in", str(csr), "-CA", str(self.ca_cert), "-CAkey", str(self.ca_key), "-CAcreateserial",
            "-out", str(cert), "-days", "2", "-extfile", str(ext_file), cwd=self.dir,
        )
        bundle = self.dir / f"{stem}-keystore.pem"
        bundle.write_bytes(cert.read_bytes() + key.read_bytes())
        return Issued(cert, key, bundle)

    def server(self, stem: str = "server") -> Issued:
        return self._issue(
            stem, "/CN=localhost",
            "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n",
        )

    def client(self, subject: str, stem: str = "client") -> Issued:
        return self._issue(stem, subject, "extendedKeyUsage=clientAuth\n")

    def encrypted_bundle(self, issued: Issued, password: str) -> pathlib.Path:
        """The keystore with its private key encrypted under ``password`` (for ssl.key.password)."""
        encrypted = self.dir / f"{issued.key.stem}-encrypted.key"
        _openssl("pkey", "-in", str(issued.key), "-aes256", "-passout", f"pass:{password}", "-out", str(encrypted), cwd=self.dir)
        bundle = self.dir / f"{issued.key.stem}-encrypted-keystore.pem"
        bundle.write_bytes(issued.cert.read_bytes() + encrypted.read_bytes())
        return bundle
