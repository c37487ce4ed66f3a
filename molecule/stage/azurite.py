"""Molecule helper for the stage scenario: start/stop Azurite, upload a data set, print a SAS."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "plugins", "module_utils"))
ACCOUNT = "devstoreaccount1"
KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="  # public


def main() -> int:
    action, port, workdir = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    pidfile = os.path.join(workdir, "azurite.pid")
    if action == "start":
        os.makedirs(workdir, exist_ok=True)
        proc = subprocess.Popen([os.path.join(ROOT, ".tools", "bin", "azurite-blob"), "--blobHost", "127.0.0.1",
                                 "--blobPort", str(port), "--location", os.path.join(workdir, "data"), "--silent",
                                 "--skipApiVersionCheck", "--loose", "--disableTelemetry"], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)
        with open(pidfile, "w", encoding="utf-8") as f:
            f.write(str(proc.pid))
        for _ in range(150):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                time.sleep(0.2)
        from amlhpc.data.cosmoflow_data import generate
        from amlhpc.data.dataset_prep import compress_all, upload_prepared
        generate(os.path.join(workdir, "raw"), train_universes=1, val_universes=1, cube=8)
        prepared = compress_all(os.path.join(workdir, "raw"), os.path.join(workdir, "gz"), prefix="v07")
        upload_prepared(prepared, f"http://127.0.0.1:{port}/{ACCOUNT}", "molecule",
                        {"account_name": ACCOUNT, "account_key": KEY}, create_container=True)
        print(len(prepared))
    elif action == "sas":
        from azure.storage.blob import ContainerSasPermissions, generate_container_sas
        now = datetime.now(timezone.utc)
        print(generate_container_sas(ACCOUNT, "molecule", account_key=KEY,
                                     permission=ContainerSasPermissions(read=True, list=True),
                                     start=now - timedelta(minutes=10), expiry=now + timedelta(hours=2)))
    elif action == "stop":
        try:
            with open(pidfile, encoding="utf-8") as f:
                os.killpg(int(f.read()), signal.SIGKILL)
        except (OSError, ValueError):
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
