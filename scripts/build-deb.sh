#!/usr/bin/env bash
# Builds the Debian package of vsched from a staged tree with
# `dpkg-deb --build --root-owner-group` (no cargo-deb: nothing to install,
# nothing to compile beyond vsched itself). docs/daemon.md, "Packaging".
#
#   cargo build --release --workspace && scripts/build-deb.sh
#   scripts/build-deb.sh --bin PATH --lib PATH --out DIR [--no-strip]
#
# Inputs (option, else environment variable, else default):
#   --bin PATH   $VSCHED_BIN       the vsched binary   (target/release/vsched)
#   --lib PATH   $VSCHED_SYNC_LIB  libvsched_sync.so   (target/release/libvsched_sync.so)
#   --out DIR    $VSCHED_DEB_DIR   where the .deb goes (target/debian)
#   --no-strip                     keep the debug info (profile.release has debug = 1)
#   $DEBFULLNAME, $DEBEMAIL        the Maintainer field
#   $SOURCE_DATE_EPOCH             timestamps (default: the last commit's)
#   $CARGO                         the cargo that lists the crates (default: cargo)
# Writes DIR/vsched_<version>_<arch>.deb (version: the workspace Cargo.toml)
# and prints its path as the last line. Needs dpkg-deb, dpkg-shlibdeps
# (dpkg-dev), binutils (strip, readelf), gzip, and cargo for the list of
# linked crates.
#
# What goes where (the binary finds the library at ../lib/vsched/ from its
# own directory: vsched_os::exec_env::library::default_library):
#   /usr/bin/vsched                          0755
#   /usr/lib/vsched/libvsched_sync.so        0644
#   /usr/lib/systemd/system/vsched.service   deploy/systemd/vsched.service
#   /etc/default/vsched                      deploy/systemd/vsched.default (conffile)
#   /usr/share/vsched/                       alerting rules, Grafana dashboard,
#                                            the RWC systemd drop-in
#   /usr/share/doc/vsched/                   docs, copyright, changelog.gz, third-party-licenses.gz
#   /usr/share/man/man1/vsched.1.gz          scripts/gen-manpage.sh
#   DEBIAN/{control,conffiles,md5sums,postinst,prerm,postrm}  deploy/debian/
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"

bin="${VSCHED_BIN:-$repo/target/release/vsched}"
lib="${VSCHED_SYNC_LIB:-$repo/target/release/libvsched_sync.so}"
out="${VSCHED_DEB_DIR:-$repo/target/debian}"
strip=yes
while [ $# -gt 0 ]; do
  case "$1" in
    --bin) bin="$2"; shift 2 ;;
    --lib) lib="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --no-strip) strip=no; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "build-deb.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
die() { echo "build-deb.sh: $*" >&2; exit 1; }
[ -x "$bin" ] || die "no vsched binary at $bin: build it (cargo build --release) or name it with --bin"
[ -f "$lib" ] || die "no runtime library at $lib: build it (cargo build --release --workspace) or name it with --lib"
cargo="${CARGO:-cargo}"
for tool in dpkg-deb dpkg-shlibdeps strip readelf gzip "$cargo"; do
  command -v "$tool" >/dev/null 2>&1 \
    || die "$tool is missing (Debian: dpkg-dev for dpkg-shlibdeps, binutils for strip/readelf)"
done

# The version of [workspace.package] in the workspace Cargo.toml.
version=$(awk '/^\[/ { in_pkg = ($0 == "[workspace.package]") }
               in_pkg && /^version *=/ { gsub(/.*= *"|".*/, ""); print; exit }' "$repo/Cargo.toml")
[ -n "$version" ] || die "no version in [workspace.package] of $repo/Cargo.toml"
binary_version=$("$bin" --version | awk '{ print $2 }')
[ "$binary_version" = "$version" ] \
  || die "$bin is version $binary_version, the workspace $version: rebuild it"
# The architecture the binary is for (not the build machine's).
case "$(readelf -h "$bin" | awk -F: '/Machine:/ { gsub(/^ +/, "", $2); print $2 }')" in
  "Advanced Micro Devices X86-64") arch=amd64 ;;
  AArch64) arch=arm64 ;;
  *) die "$bin: an architecture this script does not map to Debian's" ;;
esac
: "${SOURCE_DATE_EPOCH:=$(git -C "$repo" log -1 --format=%ct 2>/dev/null || date +%s)}"
export SOURCE_DATE_EPOCH

work=$(mktemp -d "${TMPDIR:-/tmp}/vsched-deb.XXXXXX")
trap 'rm -rf "$work"' EXIT
# dpkg-shlibdeps wants the package tree at debian/<package> beside a
# debian/control naming it.
root="$work/debian/vsched"
umask 022
mkdir -p "$root/DEBIAN"

install -D -m 0755 "$bin" "$root/usr/bin/vsched"
install -D -m 0644 "$lib" "$root/usr/lib/vsched/libvsched_sync.so"
if [ "$strip" = yes ]; then
  # Debug info only: the symbol table stays, so backtraces name functions.
  strip --strip-debug "$root/usr/bin/vsched"
  strip --strip-debug "$root/usr/lib/vsched/libvsched_sync.so"
fi
install -D -m 0644 "$repo/deploy/systemd/vsched.service" "$root/usr/lib/systemd/system/vsched.service"
install -D -m 0644 "$repo/deploy/systemd/vsched.default" "$root/etc/default/vsched"
install -D -m 0644 "$repo/deploy/prometheus/vsched-alerts.yml" "$root/usr/share/vsched/vsched-alerts.yml"
install -D -m 0644 "$repo/deploy/grafana/vsched-dashboard.json" "$root/usr/share/vsched/vsched-dashboard.json"
# The systemd drop-in that enables user-space RWC (opt-in: docs/daemon.md).
install -D -m 0644 "$repo/deploy/systemd/vsched-rwc.conf" "$root/usr/share/vsched/vsched-rwc.conf"

doc="$root/usr/share/doc/vsched"
install -D -m 0644 "$repo/README.md" "$doc/README.md"
# Uncompressed: vsched.service's Documentation= names daemon.md, and they
# are read with a pager as they are.
for page in daemon usage sync sched spin probers schema; do
  install -m 0644 "$repo/docs/$page.md" "$doc/$page.md"
done
install -D -m 0644 "$repo/docs/schema/probe-v1.json" "$doc/schema/probe-v1.json"
install -m 0644 "$repo/deploy/debian/copyright" "$doc/copyright"
commit=$(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)
{
  printf 'vsched (%s) unstable; urgency=medium\n\n' "$version"
  printf '  * Built by scripts/build-deb.sh from commit %s; the changes are the\n' "$commit"
  printf '    repository'"'"'s history.\n\n'
  printf ' -- %s <%s>  %s\n' "${DEBFULLNAME:-vsched maintainers}" "${DEBEMAIL:-noreply@vsched.invalid}" \
    "$(date -u -R -d "@$SOURCE_DATE_EPOCH")"
} | gzip -9n > "$doc/changelog.gz"

# The Rust crates linked into the binary and the library (proc macros run
# at build time only), with the license texts each ships.
{
  echo "Rust crates linked statically into /usr/bin/vsched and libvsched_sync.so"
  echo "(Cargo.lock at commit $commit), with the license texts each crate ships."
  "$cargo" tree --manifest-path "$repo/Cargo.toml" --offline --locked -e normal,no-proc-macro \
    -p vsched -p vsched-sync --prefix none --format '{p}|{l}' \
    | grep -v -e '^$' -e '^vsched' | sed 's/ (\*)$//' | sort -u \
    | while IFS='|' read -r crate license; do
      name=${crate%% *}
      ver=${crate#* v}
      printf '\n==== %s %s: %s\n' "$name" "$ver" "$license"
      found=no
      for dir in "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/"$name-$ver"; do
        [ -d "$dir" ] || continue
        for file in "$dir"/LICENSE* "$dir"/LICENCE* "$dir"/COPYING* "$dir"/UNLICENSE; do
          [ -f "$file" ] || continue
          printf -- '---- %s\n' "${file##*/}"
          cat "$file"
          found=yes
        done
        break
      done
      [ "$found" = yes ] || echo "(the crate ships no license file; its license: $license)"
    done
} | gzip -9n > "$doc/third-party-licenses.gz"
grep -q '^==== ' <(gzip -dc "$doc/third-party-licenses.gz") || die "cargo tree listed no crates"

man="$root/usr/share/man/man1"
mkdir -p "$man"
sh "$repo/scripts/gen-manpage.sh" "$bin" > "$work/vsched.1"
gzip -9n -c "$work/vsched.1" > "$man/vsched.1.gz"
chmod 0644 "$man/vsched.1.gz" "$doc/changelog.gz" "$doc/third-party-licenses.gz"

for script in postinst prerm postrm; do
  install -m 0755 "$repo/deploy/debian/$script" "$root/DEBIAN/$script"
done
echo /etc/default/vsched > "$root/DEBIAN/conffiles"
chmod 0644 "$root/DEBIAN/conffiles"

# Depends from the libraries the two ELF files need and the newest symbol
# versions they use (dpkg-shlibdeps reads Debian's symbols files).
printf 'Source: vsched\n\nPackage: vsched\nArchitecture: %s\n' "$arch" > "$work/debian/control"
depends=$(cd "$work" && dpkg-shlibdeps -O -xvsched \
  -e debian/vsched/usr/bin/vsched -e debian/vsched/usr/lib/vsched/libvsched_sync.so 2>"$work/shlibdeps.err" \
  | sed -n 's/^shlibs:Depends=//p') || { cat "$work/shlibdeps.err" >&2; die "dpkg-shlibdeps failed"; }
[ -n "$depends" ] || { cat "$work/shlibdeps.err" >&2; die "dpkg-shlibdeps found no dependencies"; }

(cd "$root" && find . -type f ! -path './DEBIAN/*' ! -path './etc/*' -printf '%P\n' | LC_ALL=C sort \
  | xargs -d '\n' md5sum) > "$root/DEBIAN/md5sums"
chmod 0644 "$root/DEBIAN/md5sums"
installed_kib=$(du -sk --apparent-size --exclude=DEBIAN "$root" | cut -f1)

cat > "$root/DEBIAN/control" <<EOF
Package: vsched
Version: $version
Architecture: $arch
Maintainer: ${DEBFULLNAME:-vsched maintainers} <${DEBEMAIL:-noreply@vsched.invalid}>
Installed-Size: $installed_kib
Depends: $depends
Suggests: prometheus
Section: admin
Priority: optional
Description: measures cloud vCPUs from inside the VM and runs programs accordingly
 vsched measures every vCPU's capacity, activity (inactive episodes) and
 topology (stacked vCPUs, SMT, LLC) from inside an ordinary Linux VM, with
 no help from the hypervisor and no kernel module.
 .
 This package has the vsched command (probe, exec, run --spin-detect,
 sched, daemon, status), the pthread runtime that vsched exec preloads
 (libvsched_sync.so), and vsched.service, which runs vsched daemon: the
 vCPU model as Prometheus metrics on loopback, with alerting rules and a
 Grafana dashboard. The service is installed but not enabled.
EOF

mkdir -p "$out"
deb="$out/vsched_${version}_${arch}.deb"
dpkg-deb --root-owner-group -Zxz --build "$root" "$deb" >&2
echo "$deb"
