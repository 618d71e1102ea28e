"""amqps:// works: a throwaway broker with a TLS listener and a CA made for the test."""

import subprocess

import pika
import pytest

from brokers import ThrowawayBroker, free_port
from safebunny.queues.consumer import QueueConsumer


def _make_ca_and_server_cert(tmp):
    def run(*args):
        subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=tmp)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
        "-subj", "/CN=safebunny test CA")
    run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr",
        "-subj", "/CN=localhost")
    (tmp / "san.ext").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    run("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
        "-out", "server.pem", "-days", "2", "-extfile", "san.ext")


@pytest.fixture(scope="module")
def tls_broker(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tls")
    _make_ca_and_server_cert(tmp)
    port = free_port()
    broker = ThrowawayBroker(plugins=(), extra_config=(
        f"listeners.ssl.default = 127.0.0.1:{port}",
        f"ssl_options.cacertfile = {tmp / 'ca.pem'}",
        f"ssl_options.certfile = {tmp / 'server.pem'}",
        f"ssl_options.keyfile = {tmp / 'server.key'}",
        "ssl_options.verify = verify_none",
        "ssl_options.fail_if_no_peer_cert = false",
    )).start()
    yield broker, port, tmp / "ca.pem"
    broker.destroy()


def test_amqps_uri_consumes_over_tls_and_checks_the_certificate(tls_broker, monkeypatch):
    broker, port, ca = tls_broker
    conn = pika.BlockingConnection(pika.URLParameters(broker.uri))
    ch = conn.channel()
    ch.queue_declare("tls-q", durable=True)
    ch.basic_publish("", "tls-q", b"over tls")
    conn.close()
    uri = f"amqps://guest:guest@localhost:{port}/%2F"
    # our CA is not a system CA: without it the handshake must fail (the certificate is checked)
    with pytest.raises(Exception, match="(?i)certificate|ssl|reach"):
        QueueConsumer(uri, "tls-q", prefetch=1).start()
    monkeypatch.setenv("SSL_CERT_FILE", str(ca))
    consumer = QueueConsumer(uri, "tls-q", prefetch=1).start()
    try:
        taken = consumer.take(1, None, first_wait=10)
        assert [d.body for d in taken] == [b"over tls"]
        assert consumer.acks.ack_through(taken[0].generation, taken[0].delivery_tag)
    finally:
        consumer.stop()
