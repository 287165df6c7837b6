#!/usr/bin/python3
"""Runs the dralens image from its OCI archive the way a container runtime would, and checks it.

1. The archive: one image that skopeo reads, named as the chart's default image (values.yaml repository, tagged
   with Chart.yaml appVersion); its config has the entrypoint, PATH and labels the chart and
   registries rely on, and no user (the chart sets one per role).
2. The content: unpacked with umoci, as a runtime does. No documentation beyond copyright files,
   no manual pages, translations, apt lists or device nodes; the runtime packages are installed
   and are exactly what the binary links (ldd and dpkg -S of the build's binary).
3. The rootfs runs: in new mount and PID namespaces (plus a user namespace when not root), with
   /proc, a minimal /dev and /tmp mounted, the root filesystem read-only as the chart sets it, the
   node role's host paths bind-mounted where the DaemonSet mounts them, and chroot into it:
   `dralens --version`, then `dralens node` with simulated GPUs against the embedded API server of
   a `dralens demo` started outside. The node must publish its ResourceSlices, serve /healthz,
   create its kubelet sockets in the host directories, and stop cleanly on SIGTERM.

Usage: rootfs_test.py --archive build/dralens-image.oci.tar --dralens build/dralens
Prints the archive and unpacked sizes and the duration. Needs umoci, skopeo, unshare and chroot
(root, or unprivileged user namespaces).
"""
import argparse
import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import urllib.error
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parents[2]
NODE = "image-node-0"
DRIVER = "gpu.dralens.dev"
DEADLINE = 60  # seconds for anything to come up; generous, never a performance bound


def log(*args):
    print("rootfs_test:", *args, flush=True)


def chart_image():
    """The chart's default image reference: values.yaml repository, Chart.yaml appVersion."""
    app_version = re.search(r'^appVersion:\s*"?([^"\s]+)"?\s*$',
                            (ROOT / "charts/dralens/Chart.yaml").read_text(), re.M).group(1)
    values = (ROOT / "charts/dralens/values.yaml").read_text()
    image = re.search(r"^image:\n(?:[ \t]+.*\n)*?[ \t]+repository:\s*(\S+)", values, re.M)
    return image.group(1), app_version


class Proc:
    """A child with its combined output collected on a thread."""

    def __init__(self, argv, env=None):
        self.proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, bufsize=1,
                                     start_new_session=True)
        self.lines = []
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        for line in self.proc.stdout:
            with self.lock:
                self.lines.append(line)

    def output(self):
        with self.lock:
            return "".join(self.lines)

    def wait_for(self, pattern, what):
        deadline = time.monotonic() + DEADLINE
        while time.monotonic() < deadline:
            m = re.search(pattern, self.output(), re.M)
            if m:
                return m
            if self.proc.poll() is not None:
                break
            time.sleep(0.1)
        raise AssertionError(f"{what}: no match for {pattern!r}; output:\n{self.output()[-4000:]}")

    def pid_to_signal(self):
        return self.proc.pid

    def stop(self, sig):
        if self.proc.poll() is None:
            try:
                os.kill(self.pid_to_signal(), sig)
            except ProcessLookupError:
                pass
        try:
            return self.proc.wait(timeout=DEADLINE)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            return None


def in_rootfs(rootfs, path):
    """Host path of `path` inside `rootfs`, following symlinks as the container would see them
    (an absolute link restarts at the rootfs, never at the host's /)."""
    parts = [p for p in pathlib.PurePosixPath(path).parts if p != "/"]
    cur = pathlib.Path(rootfs)
    hops = 0
    while parts:
        part = parts.pop(0)
        if part == "..":
            cur = cur.parent if cur != pathlib.Path(rootfs) else cur
            continue
        nxt = cur / part
        if nxt.is_symlink():
            hops += 1
            assert hops < 40, f"symlink loop at {path}"
            target = os.readlink(nxt)
            parts = [p for p in pathlib.PurePosixPath(target).parts if p != "/"] + parts
            if target.startswith("/"):
                cur = pathlib.Path(rootfs)
            continue
        cur = nxt
    return cur


# Runs inside new mount and PID namespaces: mounts what a runtime mounts, makes the root
# filesystem read-only, and chroots into it with exactly the image's environment.
CONTAINER_SH = r"""
set -eu
root=$1; volumes=$2; envfile=$3; shift 3
mount --bind "$root" "$root"
mount -t proc proc "$root/proc"
mount -t tmpfs -o mode=0755,size=1m tmpfs "$root/dev"
for d in null zero full random urandom; do
  : > "$root/dev/$d"
  mount --bind "/dev/$d" "$root/dev/$d"
done
mount -t tmpfs -o mode=1777 tmpfs "$root/tmp"
while IFS='|' read -r src dst; do
  [ -n "$src" ] && mount --bind "$src" "$root$dst"
done < "$volumes"
mount -o remount,bind,ro "$root"
exec env -i $(cat "$envfile") chroot "$root" "$@"
"""


class ContainerProc(Proc):
    """The image's entrypoint under unshare: signals go to the entrypoint (PID 1 of its PID
    namespace, as in a pod), not to unshare."""

    def pid_to_signal(self):
        children = pathlib.Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children")
        deadline = time.monotonic() + DEADLINE
        while time.monotonic() < deadline:
            pids = children.read_text().split() if children.exists() else []
            if pids:
                return int(pids[0])
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        return self.proc.pid


class Container:
    def __init__(self, bundle, scratch):
        self.rootfs = bundle / "rootfs"
        spec = json.loads((bundle / "config.json").read_text())
        self.entrypoint = spec["process"]["args"]
        self.env = spec["process"]["env"]
        self.cwd = spec["process"].get("cwd", "/")
        self.scratch = scratch
        self.unshare = ["unshare", "--mount", "--pid", "--fork", "--kill-child"]
        if os.geteuid() != 0:
            self.unshare += ["--user", "--map-root-user"]

    def start(self, args, env=(), volumes=()):
        """Starts the image's entrypoint with `args`; `volumes` are (host dir, container path)."""
        n = len(list(self.scratch.glob("run-*")))
        run = self.scratch / f"run-{n}"
        run.mkdir()
        lines = []
        for src, dst in volumes:
            # The mount point is resolved and created before the root turns read-only, as runc
            # does; the path given to mount is the resolved one, inside the rootfs.
            host = in_rootfs(self.rootfs, dst)
            host.mkdir(parents=True, exist_ok=True)
            lines.append(f"{src}|/{host.relative_to(self.rootfs)}")
        (run / "volumes").write_text("\n".join(lines) + "\n")
        for kv in list(self.env) + list(env):
            assert " " not in kv and "$" not in kv, kv
        (run / "env").write_text(" ".join(list(self.env) + list(env)) + "\n")
        argv = self.unshare + ["/bin/sh", "-c", CONTAINER_SH, "container", str(self.rootfs),
                               str(run / "volumes"), str(run / "env")] + self.entrypoint + args
        return ContainerProc(argv, env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"})


def http_json(url, method="GET", body=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as res:
        return res.status, json.loads(res.read() or b"null")


def needed_packages(binary):
    """Debian packages that provide the shared libraries `binary` links, per ldd and dpkg -S."""
    out = subprocess.run(["ldd", binary], check=True, capture_output=True, text=True).stdout
    libs = {}  # ldd's path -> the paths dpkg may know it by
    for line in out.splitlines():
        m = re.search(r"=>\s+(/\S+)", line) or re.match(r"\s*(/\S+)", line)
        if not m:
            continue  # linux-vdso
        path = os.path.realpath(m.group(1))
        names = {m.group(1), path}
        for p in list(names):
            if p.startswith("/usr/"):
                names.add(p[len("/usr"):])  # merged /usr: dpkg may know it as /lib/...
        libs[m.group(1)] = names
    every = sorted(set().union(*libs.values()))
    # One query for all; paths dpkg does not know are reported on stderr and skipped.
    r = subprocess.run(["dpkg-query", "-S"] + every, capture_output=True, text=True)
    owner = {}
    for line in r.stdout.splitlines():
        pkgs, _, path = line.partition(": ")
        owner[path] = pkgs.split(",")[0].split(":")[0].strip()
    packages = set()
    for lib, names in libs.items():
        found = sorted(owner[n] for n in names if n in owner)
        assert found, f"no Debian package provides {lib}"
        packages.add(found[0])
    return packages


def listed_packages():
    text = (ROOT / ".ci/image/runtime-packages").read_text()
    return {l.strip() for l in text.splitlines() if l.strip() and not l.strip().startswith("#")}


def installed_packages(rootfs):
    status = (rootfs / "var/lib/dpkg/status").read_text()
    out = set()
    for para in status.split("\n\n"):
        name = re.search(r"^Package:\s*(\S+)", para, re.M)
        if name and re.search(r"^Status:.*\binstalled$", para, re.M):
            out.add(name.group(1))
    return out


def du(path):
    total = 0
    for dirpath, dirnames, filenames in os.walk(path):
        for f in filenames + dirnames:
            st = os.lstat(os.path.join(dirpath, f))
            total += st.st_blocks * 512
    return total


def check_archive(archive, layout, failures):
    repository, app_version = chart_image()
    want_ref = f"{repository}:{app_version}"
    with tarfile.open(archive) as t:
        t.extractall(layout)
    index = json.loads((layout / "index.json").read_text())
    refs = [m.get("annotations", {}).get("org.opencontainers.image.ref.name")
            for m in index["manifests"]]
    if refs != [want_ref]:
        failures.append(f"the archive holds {refs}, want exactly the chart's image {want_ref}")

    def blob(digest):
        algo, hexd = digest.split(":")
        return json.loads((layout / "blobs" / algo / hexd).read_text())

    manifest = blob(index["manifests"][0]["digest"])
    config = blob(manifest["config"]["digest"])
    cfg = config.get("config", {})
    if cfg.get("Entrypoint") != ["/usr/bin/dralens"]:
        failures.append(f"entrypoint {cfg.get('Entrypoint')}, want ['/usr/bin/dralens']")
    if not any(e.startswith("PATH=") and "/usr/bin" in e for e in cfg.get("Env", [])):
        failures.append(f"no PATH with /usr/bin in {cfg.get('Env')} (the chart runs `dralens`)")
    if cfg.get("User"):
        failures.append(f"the image sets user {cfg['User']!r}; the chart sets it per role")
    labels = cfg.get("Labels", {})
    want = {"org.opencontainers.image.version": app_version,
            "org.opencontainers.image.source": "https://github.com/dralens/dralens"}
    for k, v in want.items():
        if labels.get(k) != v:
            failures.append(f"label {k}={labels.get(k)!r}, want {v!r}")
    if not re.fullmatch(r"[0-9a-f]{40}|unknown", labels.get("org.opencontainers.image.revision",
                                                            "")):
        failures.append(f"label revision {labels.get('org.opencontainers.image.revision')!r}")
    if config.get("architecture") != "amd64" or config.get("os") != "linux":
        failures.append(f"platform {config.get('os')}/{config.get('architecture')}")
    # skopeo, the tool that pushes it, reads the same image.
    r = subprocess.run(["skopeo", "inspect", f"oci-archive:{archive}:{want_ref}"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        failures.append(f"skopeo cannot read the archive: {r.stderr.strip()}")
    elif json.loads(r.stdout).get("Labels") != labels:
        failures.append(f"skopeo reads other labels: {json.loads(r.stdout).get('Labels')}")
    layers = manifest["layers"]
    log(f"image {want_ref}: {len(layers)} layers, "
        + ", ".join(f"{l['size'] / 2**20:.1f} MiB" for l in layers) + " compressed")
    return want_ref, app_version


def check_content(rootfs, binary, failures):
    extra = []
    for sub in ("usr/share/man", "usr/share/info", "usr/share/locale", "usr/share/lintian"):
        d = rootfs / sub
        if d.exists():
            extra += [str(p.relative_to(rootfs)) for p in d.rglob("*") if not p.is_dir()]
    doc = rootfs / "usr/share/doc"
    extra += [str(p.relative_to(rootfs)) for p in doc.rglob("*")
              if not p.is_dir() and p.name != "copyright"]
    lists = rootfs / "var/lib/apt/lists"
    extra += [str(p.relative_to(rootfs)) for p in lists.rglob("*")
              if not p.is_dir() and p.name != "lock"]
    extra += [str(p.relative_to(rootfs)) for p in (rootfs / "dev").iterdir()]
    extra += [str(p.relative_to(rootfs)) for p in (rootfs / "var/cache/apt").rglob("*")
              if not p.is_dir() and p.name != "lock"]
    if extra:
        failures.append(f"{len(extra)} files the image should not carry, e.g. {extra[:8]}")

    listed = listed_packages()
    needed = needed_packages(binary)
    # ca-certificates is no library: the trust store for https OTLP collectors.
    if needed != listed - {"ca-certificates"}:
        failures.append(".ci/image/runtime-packages drifted from what the binary links: missing "
                        f"{sorted(needed - listed)}, not needed {sorted(listed - needed - {'ca-certificates'})}")
    missing = listed - installed_packages(rootfs)
    if missing:
        failures.append(f"runtime packages not installed in the image: {sorted(missing)}")
    bin_path = rootfs / "usr/bin/dralens"
    if not os.access(bin_path, os.X_OK):
        failures.append("/usr/bin/dralens is missing or not executable")
    elif b".debug_info" in subprocess.run(["readelf", "-S", str(bin_path)], capture_output=True
                                          ).stdout:
        failures.append("/usr/bin/dralens carries debug information (not stripped)")


def run_node(container, dralens, scratch, failures):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("DRALENS_", "OTEL_", "KUBECONFIG"))}
    demo = Proc([dralens, "demo", "--demo-nodes=1", "--api-server-address=127.0.0.1:0",
                 "--metrics-address=127.0.0.1:0", "--demo-fault-after=0s",
                 "--demo-claim-interval=1h"], env=env)
    node = None
    try:
        api = demo.wait_for(r"API server:\s+(http://127\.0\.0\.1:\d+)", "demo").group(1)
        demo.wait_for(r"Press Ctrl-C", "demo")
        status, _ = http_json(f"{api}/api/v1/nodes", "POST", {
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": NODE, "labels": {"kubernetes.io/hostname": NODE}}})
        assert status == 201, status

        kube = scratch / "kube"
        kube.mkdir()
        (kube / "kubeconfig").write_text(
            "apiVersion: v1\nkind: Config\ncurrent-context: demo\n"
            f"clusters:\n- name: demo\n  cluster:\n    server: {api}\n"
            "contexts:\n- name: demo\n  context:\n    cluster: demo\n    user: demo\n"
            "users:\n- name: demo\n  user: {}\n")
        host = {name: scratch / name for name in ("registry", "plugin", "cdi")}
        for d in host.values():
            d.mkdir()
        # The DaemonSet's mounts with the chart's default paths.
        volumes = [(kube, "/etc/dralens"),
                   (host["registry"], "/var/lib/kubelet/plugins_registry"),
                   (host["plugin"], f"/var/lib/kubelet/plugins/{DRIVER}"),
                   (host["cdi"], "/var/run/cdi")]
        node = container.start(
            ["node", "--device-source=simulated", "--simulated-profile=dgx-h100",
             "--metrics-address=127.0.0.1:0"],
            env=[f"NODE_NAME={NODE}", "KUBECONFIG=/etc/dralens/kubeconfig"], volumes=volumes)
        node.wait_for(r"kubelet plugin serving", "node in the image")
        port = node.wait_for(r'serving metrics"? address=\S+ port=(\d+)', "node").group(1)

        deadline = time.monotonic() + DEADLINE
        devices = []
        while time.monotonic() < deadline and not devices:
            _, slices = http_json(f"{api}/apis/resource.k8s.io/v1/resourceslices")
            mine = [s for s in slices["items"] if s["spec"].get("nodeName") == NODE]
            devices = [d for s in mine if s["spec"].get("driver") == DRIVER
                       for d in s["spec"].get("devices", [])]
            time.sleep(0.2)
        gpus = [d for d in devices
                if d.get("attributes", {}).get("type", {}).get("string") == "gpu"]
        if len(gpus) != 8:
            failures.append(f"the node in the image published {len(gpus)} GPUs of {NODE} "
                            f"(dgx-h100 has 8): {[d.get('name') for d in devices]}")
        else:
            log(f"the node in the image published {len(devices)} devices of {NODE}, 8 GPUs")
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=10) as res:
            if res.status != 200:
                failures.append(f"/healthz of the node in the image answered {res.status}")
        for want in (host["registry"] / f"{DRIVER}-reg.sock", host["plugin"] / "dra.sock"):
            if not want.is_socket():
                failures.append(f"no socket {want.name} in the host directory mounted at "
                                f"{'plugins_registry' if 'reg' in want.name else 'plugins'}")
        code = node.stop(signal.SIGTERM)
        if code != 0:
            failures.append(f"the node in the image exited with {code} on SIGTERM:\n"
                            + node.output()[-3000:])
        node = None
    finally:
        if node is not None:
            node.stop(signal.SIGKILL)
            log("node output:\n" + node.output()[-3000:])
        code = demo.stop(signal.SIGINT)
        if code != 0:
            failures.append(f"the demo exited with {code}:\n{demo.output()[-3000:]}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--archive", required=True)
    parser.add_argument("--dralens", required=True, help="the build's binary (runs the demo)")
    parser.add_argument("--keep", action="store_true", help="keep the unpacked image")
    args = parser.parse_args()
    for tool in ("umoci", "skopeo", "unshare", "chroot"):
        if shutil.which(tool) is None:
            print(f"rootfs_test: {tool} is missing; run ./.ci/install-deps image", file=sys.stderr)
            return 1
    start = time.monotonic()
    scratch = pathlib.Path(tempfile.mkdtemp(prefix="dralens-image-test-"))
    failures = []
    try:
        ref, app_version = check_archive(args.archive, scratch / "layout", failures)
        bundle = scratch / "bundle"
        unpack = ["umoci", "unpack", "--image", f"{scratch / 'layout'}:{ref}", str(bundle)]
        if os.geteuid() != 0:
            unpack.insert(2, "--rootless")
        subprocess.run(unpack, check=True, capture_output=True)
        rootfs = bundle / "rootfs"
        archive_mib = os.path.getsize(args.archive) / 2**20
        log(f"sizes: archive {archive_mib:.1f} MiB, unpacked {du(rootfs) / 2**20:.1f} MiB")
        check_content(rootfs, args.dralens, failures)

        container = Container(bundle, scratch)
        version = container.start(["--version"])
        code = version.proc.wait(timeout=DEADLINE)
        version.thread.join(timeout=5)
        if code != 0 or version.output() != f"dralens {app_version}\n":
            failures.append(f"`dralens --version` in the image: exit {code}, output "
                            f"{version.output()!r}, want 'dralens {app_version}'")
        else:
            log(f"`dralens --version` in the image: {version.output().strip()}")
        if not failures:
            run_node(container, args.dralens, scratch, failures)
    except Exception as e:  # reported below with everything else
        failures.append(f"{type(e).__name__}: {e}")
    finally:
        if args.keep:
            log(f"kept {scratch}")
        else:
            shutil.rmtree(scratch, ignore_errors=True)
    log(f"finished after {time.monotonic() - start:.1f} s")
    if failures:
        print("FAILED:\n- " + "\n- ".join(failures), file=sys.stderr)
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
