#!/usr/bin/env bash
# Every real-GPU check in one go, on a machine with an NVIDIA GPU and its driver (docs/hardware.md):
# what NVML answers, what `dralens node` publishes from it, utilisation sampling under load
# (usage_on_gpu.py), then the MIG lifecycle and a time-sliced claim through the kubelet socket.
# The GPU's MIG mode and time slice are put back as they were found, whatever happens.
#   tests/hardware/run-on-gpu.sh DRALENS_BINARY MIG_ON_GPU_TEST_BINARY OUT_DIR
set -u
dralens=$1 mig_on_gpu=$2 out=$3
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
mode() { nvidia-smi --query-gpu=mig.mode.current,mig.mode.pending --format=csv,noheader; }
start=$(mode)
slices() { nvidia-smi compute-policy -l 2>&1; }
slices_start=$(slices)
restore() {
  now=$(mode)
  if [ "$now" != "$start" ]; then
    echo "MIG mode is '$now', was '$start': restoring"
    case "$start" in Disabled*) nvidia-smi -mig 0 ;; Enabled*) nvidia-smi -mig 1 ;; esac
    echo "MIG mode now: $(mode)"
  fi
  if [ "$(slices)" != "$slices_start" ]; then
    echo "time slice changed: setting the default back"
    nvidia-smi compute-policy -i 0 --set-timeslice 0
    slices
  fi
}
trap restore EXIT
echo "MIG mode at start: $start"
nvidia-smi -L
python3 "$here/nvml_probe.py" >"$out/probe.txt" 2>&1
echo "nvml_probe: exit $? ($(wc -l <"$out/probe.txt") lines in probe.txt)"
timeout 150 python3 "$here/node_on_gpu.py" --dralens "$dralens" --out "$out/node" >"$out/node.txt" 2>&1
echo "node_on_gpu: exit $?"; grep "^== " "$out/node.txt"
timeout 240 python3 "$here/usage_on_gpu.py" --dralens "$dralens" --out "$out/usage" >"$out/usage.txt" 2>&1
echo "usage_on_gpu: exit $?"; grep -E "^(PASS|FAIL|RESULT|==)" "$out/usage.txt"
DRALENS_BINARY="$dralens" timeout 240 "$mig_on_gpu" >"$out/mig.txt" 2>&1
echo "mig_on_gpu_test: exit $?"
grep -vE "^ts=.*level=debug" "$out/mig.txt" | head -120
echo "MIG mode at end: $(mode)"
