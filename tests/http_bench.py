"""HTTP endpoint figures against a running daemon: management operations per second (the
Python SDK's ServiceBusAdministrationClient over HTTPS, and raw Atom requests over HTTP)
and REST sends per second (one client in sequence, and several threads), with the daemon's
CPU per operation. A stand-in until `sbctl bench --http`.

    sbctl daemon start --default-credits-per-second 0
    python tests/http_bench.py "$(sbctl -o json daemon status | jq -r .socket)" \\
        "$(sbctl namespace connection-string)" \\
        "$(sbctl -o json daemon cert | jq -r .certificate)" 500

Prints one JSON object.
"""

from __future__ import annotations

import json
import re
import sys
import threading
import time
from pathlib import Path

import httpx
from azure.servicebus.management import ServiceBusAdministrationClient

from sbctl.client import Client
from sbctld.frontends.http.auth import make_token

KEY_NAME, KEY = "RootManageSharedAccessKey", "SAS_KEY_VALUE"
QUEUE_XML = (
    '<entry xmlns="http://www.w3.org/2005/Atom"><content type="application/xml">'
    '<QueueDescription xmlns="http://schemas.microsoft.com/netservices/2010/10/servicebus/'
    'connect"/></content></entry>'
)


def main() -> None:
    sock, conn_str, cert, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    unix = Client(Path(sock))
    port = int(re.search(r"localhost:(\d+)", conn_str).group(1))  # type: ignore[union-attr]

    def cpu() -> float:
        return float(unix.status()["cpu_seconds"])

    out: dict[str, float] = {}
    admin = ServiceBusAdministrationClient.from_connection_string(conn_str, connection_verify=cert)
    c0, t0 = cpu(), time.perf_counter()
    for i in range(n // 10):  # create + get + update + delete: 4 operations each
        name = f"bench-sdk-{i}"
        q = admin.create_queue(name)
        q = admin.get_queue(name)
        admin.update_queue(q, max_delivery_count=5)
        admin.delete_queue(name)
    ops = 4 * (n // 10)
    out["sdk_https_mgmt_ops_per_s"] = ops / (time.perf_counter() - t0)
    out["sdk_https_mgmt_cpu_us_per_op"] = (cpu() - c0) / ops * 1e6

    token = make_token(f"http://localhost:{port}", KEY_NAME, KEY, int(time.time()) + 3600)
    with httpx.Client(base_url=f"http://localhost:{port}", headers={"Authorization": token}) as c:
        c.put("/bench-q?api-version=2021-05", content=QUEUE_XML)
        c0, t0 = cpu(), time.perf_counter()
        for _ in range(n):
            c.get("/bench-q?api-version=2021-05").raise_for_status()
        out["http_mgmt_get_per_s"] = n / (time.perf_counter() - t0)
        out["http_mgmt_get_cpu_us"] = (cpu() - c0) / n * 1e6

        body = b"x" * 1024
        c0, t0 = cpu(), time.perf_counter()
        for _ in range(n):
            c.post("/bench-q/messages", content=body).raise_for_status()
        out["rest_send_per_s_1_client"] = n / (time.perf_counter() - t0)
        out["rest_send_cpu_us"] = (cpu() - c0) / n * 1e6

    threads, per = 8, n // 8

    def sender() -> None:
        with httpx.Client(
            base_url=f"http://localhost:{port}", headers={"Authorization": token}
        ) as c:
            for _ in range(per):
                c.post("/bench-q/messages", content=body).raise_for_status()

    workers = [threading.Thread(target=sender) for _ in range(threads)]
    t0 = time.perf_counter()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    out["rest_send_per_s_8_clients"] = threads * per / (time.perf_counter() - t0)
    with httpx.Client(base_url=f"http://localhost:{port}", headers={"Authorization": token}) as c:
        t0, got = time.perf_counter(), 0
        while c.delete("/bench-q/messages/head", params={"timeout": "0"}).status_code == 200:
            got += 1
        out["rest_receive_delete_per_s"] = got / (time.perf_counter() - t0)
        c.delete("/bench-q?api-version=2021-05")
    print(json.dumps({k: round(v, 1) for k, v in out.items()}))


if __name__ == "__main__":
    main()
