#!/usr/bin/env bash
# Packs a build's dralens and mig_on_gpu_test with the shared libraries they link (all but the C
# library's own), for a GPU machine that has the NVIDIA driver but not dralens's dependencies,
# such as an Ubuntu image with CUDA. Each program gets a wrapper that points LD_LIBRARY_PATH at
# the bundled libraries for that program alone, so the machine's Python and CUDA stacks keep
# their own libstdc++.
#   tests/hardware/bundle.sh BUILD_DIR OUT_DIR
#   then, there: tests/hardware/run-on-gpu.sh OUT_DIR/dralens OUT_DIR/mig_on_gpu_test RESULTS
set -euo pipefail
build=$1 out=$2
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib"
for program in "$build/dralens" "$build/tests/bench/mig_on_gpu_test"; do
  name=$(basename "$program")
  strip -o "$out/bin/$name" "$program"
  ldd "$program" | awk '/=> \// {print $3}' |
    grep -vE '/(libc|libm|libpthread|libdl|librt|ld-linux-x86-64)\.so' |
    while read -r library; do cp -L "$library" "$out/lib/"; done
  cat >"$out/$name" <<WRAPPER
#!/bin/sh
here=\$(dirname "\$(readlink -f "\$0")")
LD_LIBRARY_PATH=\$here/lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH} exec "\$here/bin/$name" "\$@"
WRAPPER
  chmod +x "$out/$name"
done
du -sh "$out"
