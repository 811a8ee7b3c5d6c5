"""JWT authentication and role rules (libs/runtime auth.py, roles.py)."""

import time

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from magnetar_protocol.errors import AuthenticationError
from magnetar_protocol.keys import key_problem
from magnetar_runtime.auth import Authenticator
from magnetar_runtime.roles import ANONYMOUS, Roles
from magnetar_runtime.settings import ServiceSettings

SECRET = "a-secret-of-at-least-thirty-two-bytes"


def settings(**kw) -> ServiceSettings:
    return ServiceSettings(**kw)


def test_off_means_everyone_is_the_anonymous_superuser():
    auth = Authenticator(settings())
    assert auth.role_of(None) == ANONYMOUS
    assert auth.roles.is_superuser(ANONYMOUS)
    assert auth.headers() == {}


def test_hs256_tokens_name_the_role_and_bad_ones_are_refused():
    auth = Authenticator(settings(auth_enabled=True, auth_jwt_secret=SECRET,
                                  auth_superuser_roles="admin, ops"))
    assert auth.role_of("Bearer " + jwt.encode({"sub": "alice"}, SECRET, "HS256")) == "alice"
    for header, why in [(None, "required"), ("Basic abc", "required"),
                        ("Bearer " + jwt.encode({"sub": "x"}, "other" * 8, "HS256"), "refused"),
                        ("Bearer " + jwt.encode({"role": "x"}, SECRET, "HS256"), "refused"),
                        ("Bearer " + jwt.encode({"sub": "x", "exp": int(time.time()) - 10}, SECRET,
                                                "HS256"), "expired")]:
        with pytest.raises(AuthenticationError, match=why):
            auth.role_of(header)
    # Services sign their own token for the first superuser role.
    own = auth.headers()["authorization"]
    assert auth.role_of(own) == "admin"
    assert auth.own_role() == "admin"  # what its in-process calls act as (rpc.serve_locally)
    assert Authenticator(settings()).own_role() == ANONYMOUS


def test_rs256_with_a_public_key():
    private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public = private.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    auth = Authenticator(settings(auth_enabled=True, auth_jwt_public_key=public,
                                  auth_service_token="given"))
    assert auth.role_of("Bearer " + jwt.encode({"sub": "svc"}, private, "RS256")) == "svc"
    with pytest.raises(AuthenticationError):  # an HS256 token is no good here
        auth.role_of("Bearer " + jwt.encode({"sub": "svc"}, SECRET, "HS256"))
    assert auth.headers() == {"authorization": "Bearer given"}


def test_enabled_without_a_key_is_a_clear_start_up_error():
    with pytest.raises(SystemExit, match="MAGNETAR_AUTH_JWT_SECRET"):
        Authenticator(settings(auth_enabled=True))


def test_roles_owner_or_superuser():
    roles = Roles("admin", enabled=True)
    assert roles.is_superuser("admin") and not roles.is_superuser("alice")
    assert roles.may_act_for("alice", "alice") and roles.may_act_for("admin", "bob")
    assert not roles.may_act_for("alice", "bob") and not roles.may_act_for("alice", None)


def test_key_names():
    assert key_problem("etl/orders daily ключ") is None
    assert "'&'" in key_problem("a&b")
    assert "empty" in key_problem("")
    assert "255" in key_problem("é" * 128)
    assert "control" in key_problem("a\nb")
    assert "string" in key_problem(7)


def test_an_oversized_token_is_refused_before_decoding():
    auth = Authenticator(settings(auth_enabled=True, auth_jwt_secret=SECRET, auth_max_token_bytes=512))
    fits = jwt.encode({"sub": "alice", "pad": "x" * 200}, SECRET, "HS256")
    assert auth.role_of("Bearer " + fits) == "alice"
    # A valid signature does not help a token over the cap: refused by its size alone.
    big = jwt.encode({"sub": "alice", "pad": "x" * 1000}, SECRET, "HS256")
    with pytest.raises(AuthenticationError, match=r"tokens over 512 bytes are refused"):
        auth.role_of("Bearer " + big)
    with pytest.raises(AuthenticationError, match=r"is 100000 bytes"):
        auth.role_of("Bearer " + "a" * 100_000)
    # The default cap (8 KiB) leaves room for any ordinary JWT, RS256 ones included.
    assert Authenticator(settings(auth_enabled=True, auth_jwt_secret=SECRET)).max_token_bytes == 8192
