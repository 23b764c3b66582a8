"""Key material for one dev cluster: a throw-away CA, the serving certificates of kube-apiserver,
kube-controller-manager and the optional JobSet and Kueue controller managers (webhooks and metrics on
loopback), the service-account signing key pair and the static token file (one token for the admin, one for
each controller manager's own identity). The JobSet and Kueue pairs and tokens are made for every cluster: the
API server reads the token file only when it starts, and ``--controllers`` may be asked for later.

A tiny CA signs the serving certificate (rather than a bare self-signed leaf) because strict X.509
verification, as Python's ssl applies it, rejects a leaf certificate used as its own trust anchor.
Everything is generated fresh for each ``up`` and lives only in the run directory.
"""

from __future__ import annotations

import datetime
import ipaddress
import secrets
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

# Names a client may use for the API server: loopback, and the in-cluster service names/IP.
SERVING_DNS_NAMES = ("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc")
SERVING_IPS = ("127.0.0.1", "10.96.0.1")
ADMIN_USER = "paralleljob-admin"
# The user the API server's bootstrap RBAC binds to the system:kube-controller-manager ClusterRole.
CONTROLLER_MANAGER_USER = "system:kube-controller-manager"
# JobSet's controller manager acts as this user, with the ClusterRoles its module ships bound to it.
JOBSET_USER = "jobset-controller-manager"
# Kueue's controller manager likewise, with the roles of its module.
KUEUE_USER = "kueue-controller-manager"
# A benchmark's operator, when it is measured beside Kueue: a plain user queued by API Priority and Fairness
# as Kueue's is (the admin's system:masters group is exempt from queueing). Bound to a role by the benchmark.
OPERATOR_USER = "paralleljob-operator"
# Real (kubelet) nodes: each kubelet authenticates as system:node:<name> in group system:nodes, with a token
# of its own. The API server reads the token file only at start, so every cluster gets tokens for this many.
MAX_REAL_NODES = 4
# The real nodes' CoreDNS reads Services and EndpointSlices as this user (a ClusterRole bound by realnodes).
COREDNS_USER = "paralleljob-dev-coredns"
REAL_NODE_PREFIX = "real-node"


def real_node_name(index: int) -> str:
    return f"{REAL_NODE_PREFIX}-{index}"


@dataclass(frozen=True)
class Pki:
    ca_cert: Path
    serving_cert: Path
    serving_key: Path
    service_account_key: Path
    service_account_public_key: Path
    token_file: Path
    admin_token: str
    controller_manager_cert: Path
    controller_manager_key: Path
    controller_manager_token: str
    jobset_cert: Path
    jobset_key: Path
    jobset_token: str
    kueue_cert: Path
    kueue_key: Path
    kueue_token: str
    operator_token: str
    node_tokens: dict[str, str]  # real node name -> its kubelet's bearer token
    coredns_token: str


def _write(path: Path, data: bytes) -> None:
    path.write_bytes(data)
    path.chmod(0o600)


def _pem_key(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def write_pki(directory: Path, days: int = 365) -> Pki:
    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    not_before, not_after = now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=days)

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(_name("paralleljob-dev-cluster-ca"))
        .issuer_name(_name("paralleljob-dev-cluster-ca"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )

    alt_names: list[x509.GeneralName] = [x509.DNSName(name) for name in SERVING_DNS_NAMES]
    alt_names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in SERVING_IPS]
    serving_key, serving_cert = _serving_pair("kube-apiserver", alt_names, ca_key, ca_cert, not_before, not_after)
    # kube-controller-manager serves /healthz on loopback; a certificate from the same CA lets `up` verify it.
    loopback: list[x509.GeneralName] = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    kcm_key, kcm_cert = _serving_pair("kube-controller-manager", loopback, ca_key, ca_cert, not_before, not_after)
    # JobSet's webhooks are called by the API server at https://127.0.0.1:<port>, so they need the same.
    jobset_key, jobset_cert = _serving_pair("jobset-webhook", loopback, ca_key, ca_cert, not_before, not_after)
    kueue_key, kueue_cert = _serving_pair("kueue-webhook", loopback, ca_key, ca_cert, not_before, not_after)

    # The API server signs service-account tokens with this key; RSA is what every verifier accepts.
    service_account_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    token, kcm_token, jobset_token, kueue_token = (secrets.token_urlsafe(32) for _ in range(4))
    pki = Pki(
        ca_cert=directory / "ca.crt",
        serving_cert=directory / "apiserver.crt",
        serving_key=directory / "apiserver.key",
        service_account_key=directory / "sa.key",
        service_account_public_key=directory / "sa.pub",
        token_file=directory / "tokens.csv",
        admin_token=token,
        controller_manager_cert=directory / "kube-controller-manager.crt",
        controller_manager_key=directory / "kube-controller-manager.key",
        controller_manager_token=kcm_token,
        jobset_cert=directory / "jobset.crt",
        jobset_key=directory / "jobset.key",
        jobset_token=jobset_token,
        kueue_cert=directory / "kueue.crt",
        kueue_key=directory / "kueue.key",
        kueue_token=kueue_token,
        operator_token=secrets.token_urlsafe(32),
        node_tokens={real_node_name(i): secrets.token_urlsafe(32) for i in range(MAX_REAL_NODES)},
        coredns_token=secrets.token_urlsafe(32),
    )
    _write(pki.ca_cert, ca_cert.public_bytes(serialization.Encoding.PEM))
    _write(pki.serving_cert, serving_cert.public_bytes(serialization.Encoding.PEM))
    _write(pki.serving_key, _pem_key(serving_key))
    _write(pki.controller_manager_cert, kcm_cert.public_bytes(serialization.Encoding.PEM))
    _write(pki.controller_manager_key, _pem_key(kcm_key))
    _write(pki.jobset_cert, jobset_cert.public_bytes(serialization.Encoding.PEM))
    _write(pki.jobset_key, _pem_key(jobset_key))
    _write(pki.kueue_cert, kueue_cert.public_bytes(serialization.Encoding.PEM))
    _write(pki.kueue_key, _pem_key(kueue_key))
    _write(pki.service_account_key, _pem_key(service_account_key))
    _write(
        pki.service_account_public_key,
        service_account_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        ),
    )
    # token,user,uid,"groups": system:masters is the superuser group that RBAC always allows. The
    # controller manager gets no group: its bootstrap role lets it mint per-controller service-account
    # tokens, and each controller then acts with its own bootstrap role, as on a real cluster.
    lines = [
        f'{token},{ADMIN_USER},{ADMIN_USER},"system:masters"',
        f"{kcm_token},{CONTROLLER_MANAGER_USER},{CONTROLLER_MANAGER_USER}",
        f"{jobset_token},{JOBSET_USER},{JOBSET_USER}",
        f"{kueue_token},{KUEUE_USER},{KUEUE_USER}",
        f"{pki.operator_token},{OPERATOR_USER},{OPERATOR_USER}",
        f"{pki.coredns_token},{COREDNS_USER},{COREDNS_USER}",
        *(f'{secret},system:node:{node},system:node:{node},"system:nodes"' for node, secret in pki.node_tokens.items()),
    ]
    _write(pki.token_file, ("\n".join(lines) + "\n").encode())
    return pki


def _serving_pair(
    common_name: str,
    alt_names: list[x509.GeneralName],
    ca_key: ec.EllipticCurvePrivateKey,
    ca_cert: x509.Certificate,
    not_before: datetime.datetime,
    not_after: datetime.datetime,
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName(alt_names), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return key, cert
