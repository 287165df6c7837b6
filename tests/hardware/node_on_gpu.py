#!/usr/bin/env python3
"""Runs `dralens node --device-source=nvml` on a real GPU machine and keeps what it published.

Not part of the test suite: it needs an NVIDIA GPU and its driver. A `dralens demo` started
here provides the API server (its own simulated node is ignored); the node role then discovers
the real GPUs through libnvidia-ml.so.1, publishes its ResourceSlices and serves /metrics. For
each mode (plain, --dynamic-mig) it writes to --out:
  slices-<mode>.json   the node's ResourceSlices as the API server holds them
  metrics-<mode>.txt   the node's /metrics
  log-<mode>.txt       the node's log
and prints a summary: devices by type, and the attributes of the first device of each type.
Compare them with nvidia-smi and tests/hardware/nvml_probe.py (docs/hardware.md).
"""

import argparse
import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

NODE = "gpu-node"
DRIVER = "gpu.dralens.dev"


class Proc:
    def __init__(self, argv, env):
        self.lines = []
        self.p = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.p.stdout:
            self.lines.append(line)

    def wait_for(self, pattern, seconds=60):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            for line in list(self.lines):
                m = re.search(pattern, line)
                if m:
                    return m
            if self.p.poll() is not None:
                break
            time.sleep(0.1)
        raise RuntimeError(f"no line matching {pattern!r}:\n{''.join(self.lines[-40:])}")

    def stop(self, sig=signal.SIGTERM):
        if self.p.poll() is None:
            self.p.send_signal(sig)
        try:
            return self.p.wait(20)
        except subprocess.TimeoutExpired:
            self.p.kill()
            return self.p.wait()


def http(url, method="GET", body=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as res:
            return res.status, res.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def run_mode(dralens, api, scratch, out, mode, extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DRALENS_", "OTEL_"))}
    dirs = {name: scratch / mode / name for name in ("registry", "plugins", "cdi")}
    for d in dirs.values():
        d.mkdir(parents=True)
    node = Proc([dralens, "node", "--device-source=nvml", f"--node-name={NODE}",
                 f"--kubeconfig={scratch / 'kubeconfig'}",
                 f"--kubelet-registry-dir={dirs['registry']}",
                 f"--kubelet-plugins-dir={dirs['plugins']}", f"--cdi-root={dirs['cdi']}",
                 "--metrics-address=127.0.0.1:0", "--device-taints", "--log-level=debug"] + extra,
                env)
    try:
        port = node.wait_for(r'serving metrics"? address=\S+ port=(\d+)').group(1)
        devices, slices = [], {}
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            _, body = http(f"{api}/apis/resource.k8s.io/v1/resourceslices")
            slices = json.loads(body)
            mine = [s for s in slices["items"] if s["spec"].get("nodeName") == NODE]
            devices = [d for s in mine for d in s["spec"].get("devices", [])]
            if devices:
                break
            time.sleep(0.5)
        time.sleep(3)  # let a health event or two arrive
        _, body = http(f"{api}/apis/resource.k8s.io/v1/resourceslices")
        slices = json.loads(body)
        mine = [s for s in slices["items"] if s["spec"].get("nodeName") == NODE]
        (out / f"slices-{mode}.json").write_text(json.dumps(mine, indent=1))
        _, metrics = http(f"http://127.0.0.1:{port}/metrics")
        (out / f"metrics-{mode}.txt").write_text(metrics)
        ready = http(f"http://127.0.0.1:{port}/readyz")
        by_type = {}
        for s in mine:
            for d in s["spec"].get("devices", []):
                t = d.get("attributes", {}).get("type", {}).get("string", "?")
                by_type.setdefault(t, []).append(d)
        print(f"== {mode}: {len(mine)} slices, "
              + ", ".join(f"{len(v)} {t}" for t, v in sorted(by_type.items())) + f"; readyz {ready!r}")
        for t, ds in sorted(by_type.items()):
            print(f"-- first {t} device:\n{json.dumps(ds[0], indent=1)[:3000]}")
        for s in mine:
            if s["spec"].get("sharedCounters"):
                print(f"-- shared counters: {json.dumps(s['spec']['sharedCounters'])[:1500]}")
        for line in metrics.splitlines():
            if line.startswith(("dralens_device_state", "dralens_nvml", "dralens_mig", "dralens_health")):
                print(line)
    finally:
        code = node.stop()
        (out / f"log-{mode}.txt").write_text("".join(node.lines))
        print(f"== {mode}: node exited with {code}; log tail:")
        print("".join(node.lines[-15:]))


def start_api(dralens, scratch):
    """A `dralens demo` as the API server, the GPU node registered and a kubeconfig for it in
    `scratch`. Returns (the demo's Proc, the API server's URL)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DRALENS_", "OTEL_"))}
    demo = Proc([dralens, "demo", "--demo-nodes=1", "--api-server-address=127.0.0.1:0",
                 "--metrics-address=127.0.0.1:0", "--demo-fault-after=0s",
                 "--demo-claim-interval=1h"], env)
    api = demo.wait_for(r"API server:\s+(http://127\.0\.0\.1:\d+)").group(1)
    demo.wait_for(r"Press Ctrl-C")
    http(f"{api}/api/v1/nodes", "POST", {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": NODE, "labels": {"kubernetes.io/hostname": NODE}}})
    (scratch / "kubeconfig").write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: demo\n"
        f"clusters:\n- name: demo\n  cluster:\n    server: {api}\n"
        "contexts:\n- name: demo\n  context:\n    cluster: demo\n    user: demo\n"
        "users:\n- name: demo\n  user: {}\n")
    return demo, api


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dralens", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    scratch = pathlib.Path(tempfile.mkdtemp(prefix="dralens-gpu-"))
    demo, api = start_api(args.dralens, scratch)
    try:
        for mode, extra in (("plain", []), ("dynamic-mig", ["--dynamic-mig"])):
            try:
                run_mode(args.dralens, api, scratch, out, mode, extra)
            except Exception as e:  # keep going: the other mode still tells something
                print(f"== {mode}: FAILED {e}")
    finally:
        demo.stop(signal.SIGINT)
    return 0


if __name__ == "__main__":
    sys.exit(main())
