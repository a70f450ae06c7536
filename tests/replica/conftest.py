"""The replica tests' store: one real S3 server on 127.0.0.1 per session (moto's server mode),
a fresh prefix per test, a fault-injecting proxy in front of it when a test asks."""

import pytest

from tests.support.s3_support import S3, FaultProxy


@pytest.fixture(scope="session")
def s3():
    server = S3()
    yield server
    server.stop()


@pytest.fixture
def proxy(s3):
    p = FaultProxy(s3.port)
    yield p
    p.stop()


@pytest.fixture
def prefix():
    return S3.prefix()
