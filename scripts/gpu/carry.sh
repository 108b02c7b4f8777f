#!/usr/bin/env bash
# Prepare what a GPU machine without a package registry lacks, for scripts/gpu-check-*.sh:
#   .whl/  Python 3.12 wheels of overlapscope's own needs and HTA (the machine brings torch)
#   .ipr/  iproute2 (ip, tc) from Debian, with wrappers, for the lab's shaped link
# Both are ignored by git; a device call carries them (carry: [".whl", ".ipr"]).
# Usage: scripts/gpu/carry.sh        (run here, on a Debian machine with pip and apt)
set -euo pipefail
cd "$(dirname "$0")/../.."
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo /.whl/ >>.git/info/exclude
grep -qx '/.ipr/' .git/info/exclude 2>/dev/null || echo /.ipr/ >>.git/info/exclude

rm -rf .whl && mkdir .whl
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 -d .whl \
  orjson==3.13.0 msgspec==0.22.0 isal==1.9.1 pandas==3.1.1 HolisticTraceAnalysis==0.5.0 \
  plotly==7.1.0 pydot==4.0.1

debs=$(mktemp -d)
(cd "$debs" && apt-get download -q iproute2 libmnl0 libbpf1 libelf1 libxtables12 libcap2 libdb5.3 \
  libtirpc3 libbsd0 libmd0 libgssapi-krb5-2 libkrb5-3 libk5crypto3 libkrb5support0 libcom-err2 \
  libkeyutils1 libselinux1 libpcre2-8-0 zlib1g libzstd1 liblzma5 >/dev/null)
rm -rf .ipr && mkdir -p .ipr/root .ipr/bin
for f in "$debs"/*.deb; do dpkg -x "$f" .ipr/root; done
rm -rf "$debs" .ipr/root/usr/share
for tool in ip tc; do
  cat >".ipr/bin/$tool" <<WRAP
#!/bin/sh
# $tool from Debian's iproute2, carried to a machine without it (scripts/gpu/carry.sh)
root=\$(cd "\$(dirname "\$0")/../root" && pwd)
bin=\$root/sbin/$tool; [ -x "\$bin" ] || bin=\$root/usr/sbin/$tool; [ -x "\$bin" ] || bin=\$root/bin/$tool
libs=\$root/lib/x86_64-linux-gnu:\$root/usr/lib/x86_64-linux-gnu
if [ "$tool" = ip ] && [ "\$1" = netns ] && [ "\$2" = exec ]; then
  # the command run inside the namespace gets the caller's library path back, not ours
  ns=\$3; shift 3
  if [ -n "\${LD_LIBRARY_PATH+x}" ]; then
    LD_LIBRARY_PATH=\$libs exec "\$bin" netns exec "\$ns" env LD_LIBRARY_PATH="\$LD_LIBRARY_PATH" "\$@"
  fi
  LD_LIBRARY_PATH=\$libs exec "\$bin" netns exec "\$ns" env -u LD_LIBRARY_PATH "\$@"
fi
LD_LIBRARY_PATH=\$libs exec "\$bin" "\$@"
WRAP
  chmod +x ".ipr/bin/$tool"
done
.ipr/bin/ip -V && .ipr/bin/tc -V
du -sh .whl .ipr
