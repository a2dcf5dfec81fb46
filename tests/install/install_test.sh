#!/usr/bin/env bash
# install_test.sh BUILD_DIR SOURCE_DIR VERSION CC
#
# `cmake --install` of a built tree into a temporary prefix, then what a user
# does with it, from a folder outside the source tree:
#   - every file of the install is there (the soname chain, the headers, the
#     tools in bin/, the emulated cluster with every part it sources, zpp.pc,
#     the CMake package, zpp-train's text, the docs);
#   - nothing installed leans on the build tree (RPATH/RUNPATH), and the
#     tools run from the prefix with an empty environment;
#   - a small C program builds and runs against the prefix once with
#     pkg-config and once with find_package(zpp) -> zpp::zpp, and once more
#     against the build tree's one include directory.
# The consumers are linked with an rpath to the library they were built
# against (pkg-config's libdir by hand, CMake's own build rpath) and run with
# an empty environment: a stray LD_LIBRARY_PATH cannot pick the library for
# them, and ldd must show the prefix's libzpp.so.0.
# The directories come from GNUInstallDirs through the environment
# (ZPP_LIBDIR, ZPP_BINDIR, ...: tests/install/CMakeLists.txt); ZPP_CFLAGS are
# the build's sanitizer flags, which a program linking a sanitized libzpp.so
# needs too.
set -euo pipefail
build=$(readlink -f "$1")
src=$(readlink -f "$2")
version=$3
cc=$4
here=$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")
read -r -a cflags <<<"${ZPP_CFLAGS:-}"

fails=0
fail() { echo "install_test: FAIL: $*" >&2; fails=$((fails + 1)); }
die() { echo "install_test: FAIL: $*" >&2; exit 1; }
log() { echo "install_test: $*"; }

tmp=$(mktemp -d /tmp/zpp-install-test.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
prefix=$(readlink -f "$tmp")/prefix

log "cmake --install $build --prefix $prefix"
cmake --install "$build" --prefix "$prefix" >"$tmp/install.log" 2>&1 ||
  { cat "$tmp/install.log" >&2; die "cmake --install failed"; }

# --- the files -----------------------------------------------------------------------
lib=$prefix/$ZPP_LIBDIR
major=${version%%.*}
want_file() { [[ -f $1 && ! -L $1 ]] || fail "missing file ${1#"$prefix"/}"; }
want_exe() { [[ -f $1 && -x $1 ]] || fail "missing executable ${1#"$prefix"/}"; }
want_link() {  # LINK TARGET: a symlink whose text is TARGET
  [[ -L $1 ]] || { fail "missing symlink ${1#"$prefix"/}"; return; }
  [[ $(readlink "$1") == "$2" ]] || fail "${1#"$prefix"/} -> $(readlink "$1"), expected $2"
}

want_file "$lib/libzpp.so.$version"
want_link "$lib/libzpp.so.$major" "libzpp.so.$version"
want_link "$lib/libzpp.so" "libzpp.so.$major"
if [[ -f $lib/libzpp.so.$version ]]; then
  soname=$(readelf -d "$lib/libzpp.so.$version" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
  [[ $soname == "libzpp.so.$major" ]] || fail "soname '$soname', expected libzpp.so.$major"
fi
want_file "$prefix/$ZPP_INCLUDEDIR/zpp.h"
want_file "$prefix/$ZPP_INCLUDEDIR/zpp_version.h"
for t in zpp-perf zpp-health zpp-info zpp-train zpp-perf-compare zpp-emucluster; do
  want_exe "$prefix/$ZPP_BINDIR/$t"
done
want_file "$lib/pkgconfig/zpp.pc"
for f in zppConfig.cmake zppConfigVersion.cmake zppTargets.cmake; do
  want_file "$lib/cmake/zpp/$f"
done
want_file "$prefix/$ZPP_DATADIR/zpp/corpus.txt"
want_file "$prefix/$ZPP_DOCDIR/README.md"
want_file "$prefix/$ZPP_DOCDIR/zpp-perf.schema.json"
for d in "$src"/docs/*; do
  want_file "$prefix/$ZPP_DOCDIR/$(basename "$d")"
done

# The emulated cluster runs from its link in bin/ and finds, beside its real
# path, every part it or its parts name as "$HERE/...": those it sources and
# netns-rsh (named by emucluster-ranks.sh).
emu=$prefix/$ZPP_BINDIR/zpp-emucluster
if [[ -L $emu ]]; then
  [[ $(readlink "$emu") != /* ]] || fail "bin/zpp-emucluster is an absolute link: the prefix cannot move"
  emu_dir=$(dirname "$(readlink -f "$emu")")
  [[ $emu_dir == "$prefix"/* ]] || fail "zpp-emucluster resolves to $emu_dir, outside the prefix"
  # shellcheck disable=SC2016  # the literal text $HERE, as the script spells it
  parts=$(grep -oh '\$HERE/[A-Za-z0-9._-]*' "$emu_dir"/emucluster*.sh | sort -u | sed 's#\$HERE/##')
  [[ -n $parts ]] || fail "emucluster.sh names no part beside itself: this check is out of date"
  for p in $parts; do
    [[ -f $emu_dir/$p ]] || fail "the emulated cluster's part $p is not installed beside emucluster.sh"
  done
  env -i PATH=/usr/bin:/bin "$emu" --help >"$tmp/emu-help" 2>&1 || fail "zpp-emucluster --help failed"
else
  fail "bin/zpp-emucluster is not a symlink"
fi

# --- nothing from the build tree ---------------------------------------------------------
while IFS= read -r -d '' f; do
  if head -c4 "$f" | grep -q $'\x7fELF'; then
    paths=$(readelf -d "$f" | sed -n 's/.*(R\(UN\)\{0,1\}PATH).*\[\(.*\)\]/\2/p')
    case ":$paths:" in
      *"$build"* | *"$src"*) fail "${f#"$prefix"/} has the rpath '$paths' into the build or source tree" ;;
    esac
    if ldd "$f" | grep -q 'not found'; then
      fail "${f#"$prefix"/}: $(ldd "$f" | grep 'not found' | tr -s ' \t\n' ' ')"
    fi
  fi
done < <(find "$prefix" -type f -print0)

# The tools from the prefix with nothing in the environment, run from /.
info=$(cd / && env -i "$prefix/$ZPP_BINDIR/zpp-info" 2>&1) || fail "bin/zpp-info failed: $info"
grep -q "$version" <<<"$info" || fail "bin/zpp-info does not print the version $version"
for t in zpp-perf zpp-health zpp-train; do
  (cd / && env -i "$prefix/$ZPP_BINDIR/$t" --help >"$tmp/$t-help" 2>&1) || fail "bin/$t --help failed"
done
# zpp-train's default text is the installed one, not the source tree's.
grep -qF "$prefix/$ZPP_BINDIR/../$ZPP_DATADIR/zpp/corpus.txt" "$tmp/zpp-train-help" ||
  fail "installed zpp-train's default --data is not the installed corpus: $(grep -- --data "$tmp/zpp-train-help")"

# --- a user's program, outside the source tree ---------------------------------------------
cp -r "$here/consumer" "$tmp/consumer"
cd "$tmp/consumer"
expect="zpp $version $((${version%%.*} * 10000 + $(cut -d. -f2 <<<"$version") * 100 + ${version##*.}))"
check_run() {  # NAME BINARY
  local out
  out=$(env -i "$2" 2>&1) || { fail "$1: the program failed: $out"; return; }
  [[ $out == "$expect "* ]] || fail "$1: printed '$out', expected '$expect ...'"
  local loaded
  loaded=$(ldd "$2" | awk '$1 == "libzpp.so.'"$major"'" { print $3 }')
  [[ $loaded == "$3"/* ]] || fail "$1: loads libzpp.so.$major from '$loaded', not from $3"
  log "$1: $out"
}

# pkg-config, with only the prefix's .pc files in sight.
export PKG_CONFIG_LIBDIR=$lib/pkgconfig PKG_CONFIG_PATH=
if pc_version=$(pkg-config --modversion zpp 2>&1); then
  [[ $pc_version == "$version" ]] || fail "zpp.pc says version $pc_version, expected $version"
  pc_libdir=$(pkg-config --variable=libdir zpp)
  # shellcheck disable=SC2046  # pkg-config prints a list of flags
  if "$cc" "${cflags[@]}" -o hello-pc hello_zpp.c $(pkg-config --cflags --libs zpp) \
     -Wl,-rpath,"$pc_libdir" 2>"$tmp/pc.err"; then
    check_run pkg-config ./hello-pc "$lib"
  else
    fail "cc with pkg-config's flags: $(cat "$tmp/pc.err")"
  fi
else
  fail "pkg-config cannot read zpp.pc: $pc_version"
fi
unset PKG_CONFIG_LIBDIR PKG_CONFIG_PATH

# find_package(zpp <version> EXACT) -> zpp::zpp.
if cmake -S . -B build-cmake -DCMAKE_PREFIX_PATH="$prefix" -DZPP_EXPECT_VERSION="$version" \
     -DCMAKE_C_COMPILER="$cc" -DCMAKE_C_FLAGS="${ZPP_CFLAGS:-}" >"$tmp/cmake.log" 2>&1 &&
   cmake --build build-cmake >>"$tmp/cmake.log" 2>&1; then
  grep -q "zpp_DIR:PATH=$lib/cmake/zpp" build-cmake/CMakeCache.txt ||
    fail "find_package(zpp) found $(grep zpp_DIR build-cmake/CMakeCache.txt), not the prefix's"
  check_run find_package ./build-cmake/hello_zpp "$lib"
else
  fail "find_package(zpp): $(tail -20 "$tmp/cmake.log")"
fi

# The build tree's one include directory, no install.
if "$cc" "${cflags[@]}" -o hello-build hello_zpp.c -I"$build/include" -L"$build/lib" -lzpp \
   -Wl,-rpath,"$build/lib" 2>"$tmp/build.err"; then
  check_run build-tree ./hello-build "$build/lib"
else
  fail "cc -I build/include: $(cat "$tmp/build.err")"
fi

if ((fails)); then
  echo "install_test: $fails check(s) failed" >&2
  exit 1
fi
log "ok: the install in $prefix is complete and usable"
