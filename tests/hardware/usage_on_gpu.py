#!/usr/bin/env python3
"""Utilisation sampling of `dralens node --device-source=nvml` on a real GPU, under real load.

Not part of the test suite: it needs an NVIDIA GPU, its driver and PyTorch (for the load). Two
phases, each with the node sampling every second (--utilization-interval=1s):
  full  the GPU idle, then a matrix-multiply loop on it, then idle again: gpu-0's
        dralens_device_utilization_ratio (nvmlDeviceGetUtilizationRates) and memory used;
  mig   MIG mode on and one smallest instance made with nvidia-smi (profile ID 19: 1g.10gb on
        an H100, 1g.18gb on an H200; a static MIG device), idle, then the same loop inside the
        instance: the MIG device's ratio comes from GPM.
The GPU is left as found: the instance is destroyed and MIG mode switched back off, whatever
happens. Prints a table per phase and PASS/FAIL lines; writes each phase's last /metrics and
the node's log to --out.
"""

import argparse
import os
import pathlib
import re
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from node_on_gpu import NODE, Proc, http, start_api  # noqa: E402

LOAD = """
import sys, time, torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)
end = time.time() + float(sys.argv[1])
while time.time() < end:
    for _ in range(20):
        b = a @ a
    torch.cuda.synchronize()
print("load done", flush=True)
"""


def series(metrics, family):
    out = {}
    for m in re.finditer(rf'^{family}{{device="([^"]+)"}} (\S+)$', metrics, re.M):
        out[m.group(1)] = float(m.group(2))
    return out


def smi(*args):
    try:
        r = subprocess.run(["nvidia-smi", *args], capture_output=True, text=True)
    except FileNotFoundError:
        return "no nvidia-smi"
    return (r.stdout + r.stderr).strip()


def device_named(metrics, uuid):
    """The device name the node published for `uuid`, from dralens_device_info."""
    for m in re.finditer(r"^dralens_device_info\{([^}]*)\}", metrics, re.M):
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
        if labels.get("uuid") == uuid:
            return labels.get("device")
    return None


def run_phase(dralens, scratch, out, phase, device, load_env, source="nvml"):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DRALENS_", "OTEL_"))}
    dirs = {name: scratch / phase / name for name in ("registry", "plugins", "cdi")}
    for d in dirs.values():
        d.mkdir(parents=True)
    node = Proc([dralens, "node", f"--device-source={source}", f"--node-name={NODE}",
                 f"--kubeconfig={scratch / 'kubeconfig'}",
                 f"--kubelet-registry-dir={dirs['registry']}",
                 f"--kubelet-plugins-dir={dirs['plugins']}", f"--cdi-root={dirs['cdi']}",
                 "--metrics-address=127.0.0.1:0", "--utilization-interval=1s",
                 "--log-level=debug"], env)
    rows = []
    try:
        port = node.wait_for(r'serving metrics"? address=\S+ port=(\d+)').group(1)
        metrics = ""

        def sample(label):
            nonlocal metrics
            _, metrics = http(f"http://127.0.0.1:{port}/metrics")
            u = series(metrics, "dralens_device_utilization_ratio").get(device)
            m = series(metrics, "dralens_device_memory_used_bytes").get(device)
            rows.append((label, u, m))
            mib = "-" if m is None else f"{m / 2**20:.0f}"
            print(f"  {phase:4} {label:5} util={u} mem_used_mib={mib}", flush=True)

        time.sleep(2.5)
        if device is None:  # a MIG device: its published name, by its UUID
            _, metrics = http(f"http://127.0.0.1:{port}/metrics")
            device = device_named(metrics, load_env["CUDA_VISIBLE_DEVICES"])
            print(f"  {load_env['CUDA_VISIBLE_DEVICES']} is published as {device}")
        for _ in range(4):
            sample("idle")
            time.sleep(1)
        program = LOAD if source == "nvml" else "import time; time.sleep(1); print('no load')"
        load = subprocess.Popen([sys.executable, "-c", program, "14"], env={**os.environ, **load_env},
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        time.sleep(4)  # CUDA context and the first kernels
        print("  nvidia-smi during load: " + smi("--query-gpu=utilization.gpu,memory.used",
                                                 "--format=csv,noheader"), flush=True)
        for _ in range(8):
            sample("load")
            time.sleep(1)
        print("  load: " + load.communicate(timeout=60)[0].strip().replace("\n", " | "))
        time.sleep(2)
        for _ in range(4):
            sample("after")
            time.sleep(1)
        (out / f"metrics-{phase}.txt").write_text(metrics)
        rounds = re.findall(r'^dralens_usage_rounds_total\{result="(\w+)"\} (\S+)$', metrics, re.M)
        print(f"  rounds: {dict(rounds)}")
    finally:
        code = node.stop()
        (out / f"log-{phase}.txt").write_text("".join(node.lines))
        print(f"== {phase}: node exited with {code}")
    return rows


def check(phase, rows, busy):
    def vals(label, i):
        return [r[i] for r in rows if r[0] == label and r[i] is not None]
    idle, load, after = vals("idle", 1), vals("load", 1), vals("after", 1)
    ok = True
    for what, good in ((f"idle utilisation at most 0.05 ({idle})", idle and max(idle) <= 0.05),
                       (f"peak utilisation under load at least {busy} ({load})",
                        load and max(load) >= busy),
                       (f"utilisation back to at most 0.05 after ({after})",
                        after and after[-1] <= 0.05),
                       ("memory used higher under load",
                        vals("load", 2) and vals("idle", 2)
                        and max(vals("load", 2)) > max(vals("idle", 2)) + (256 << 20))):
        print(f"{'PASS' if good else 'FAIL'} {phase}: {what}")
        ok = ok and bool(good)
    return ok


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dralens", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--dry-run", action="store_true",
                        help="no GPU: the simulated source, no load and no MIG phase (checks the "
                        "script itself)")
    args = parser.parse_args()
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    scratch = pathlib.Path(tempfile.mkdtemp(prefix="dralens-usage-"))
    demo, _ = start_api(args.dralens, scratch)
    if args.dry_run:
        try:
            rows = run_phase(args.dralens, scratch, out, "full", "gpu-0", {}, source="simulated")
            check("full", rows, 0.9)
            return 0 if len(rows) == 16 and all(r[1] == 0 for r in rows) else 1
        finally:
            demo.stop(signal.SIGINT)
    start_mode = smi("--query-gpu=mig.mode.current", "--format=csv,noheader")
    print(f"MIG mode at start: {start_mode}")
    ok = True
    mig_touched = False
    try:
        print("== full")
        ok = check("full", run_phase(args.dralens, scratch, out, "full", "gpu-0", {}), 0.9) and ok
        if not start_mode.startswith("Disabled"):
            raise RuntimeError("MIG mode was not Disabled at start: the MIG phase is skipped")
        mig_touched = True
        print("== mig: " + smi("-i", "0", "-mig", "1").replace("\n", " | "))
        try:
            print("  " + smi("mig", "-i", "0", "-cgi", "19", "-C").replace("\n", " | "))
            listing = smi("-L")
            print("  " + listing.replace("\n", " | "))
            mig_uuid = re.search(r"UUID: (MIG-[0-9a-f-]+)", listing).group(1)
            ok = check("mig", run_phase(args.dralens, scratch, out, "mig", None,
                                        {"CUDA_VISIBLE_DEVICES": mig_uuid}), 0.5) and ok
        except Exception as e:
            print(f"FAIL mig: {e}")
            ok = False
    except RuntimeError as e:
        print(f"== {e}")
    finally:
        if mig_touched:
            print("== cleanup: " + " | ".join(
                smi(*a).replace("\n", " ") for a in (("mig", "-i", "0", "-dci"),
                                                     ("mig", "-i", "0", "-dgi"),
                                                     ("-i", "0", "-mig", "0"))))
        print("  MIG mode now: " + smi("--query-gpu=mig.mode.current,mig.mode.pending",
                                       "--format=csv,noheader"))
        demo.stop(signal.SIGINT)
    print("RESULT " + ("PASS" if ok else "FAIL"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
