#!/usr/bin/env bash
# `make install` and `make uninstall`: SAT's C library as a system library.
#
#   scripts/install.sh install    copies the built files under DESTDIR/PREFIX
#   scripts/install.sh uninstall  removes what install wrote there
#
# Settings (from the Makefile): PREFIX (absolute), DESTDIR (staging root, may
# be empty), LIBDIR (relative to PREFIX, default lib), RPATH (1: sat.pc's Libs
# carry -Wl,-rpath), VERSION (x.y.z), TARGET_DIR (cargo's target folder).
#
# It never calls sudo: a prefix the user cannot write is reported, and the
# user runs it again with the rights the prefix needs.
set -euo pipefail

action=${1:?usage: scripts/install.sh install|uninstall}
: "${PREFIX:?PREFIX is not set}" "${VERSION:?VERSION is not set}"
DESTDIR=${DESTDIR:-}
LIBDIR=${LIBDIR:-lib}
RPATH=${RPATH:-0}
TARGET_DIR=${TARGET_DIR:-target}
case "$PREFIX" in /*) ;; *) echo "install: PREFIX must be absolute (got $PREFIX)" >&2; exit 2 ;; esac
case "$LIBDIR" in /* | *..*) echo "install: LIBDIR is a folder under PREFIX, such as lib or lib64 (got $LIBDIR)" >&2; exit 2 ;; esac

abi=${VERSION%%.*}
root="$DESTDIR$PREFIX"
# Every file install writes, relative to the prefix; uninstall reads the
# list back, so that it removes what an older version installed too.
manifest_rel=share/sat/installed-files
manifest="$root/$manifest_rel"
# How many folders of the prefix's own path install made (the prefix, its
# parent...): uninstall removes those too, where they are left empty, and
# never one that was there before.
made_rel=share/sat/made-prefix-folders
made="$root/$made_rel"

# What libsat.a needs besides itself and libfabric, as printed by
# `cargo rustc -p sat-capi --crate-type staticlib -- --print native-static-libs`.
native_static=(gcc_s util rt pthread m dl c)

writable() {
    local dir=$1
    while [ ! -e "$dir" ]; do dir=$(dirname "$dir"); done
    if [ ! -w "$dir" ]; then
        echo "install: $dir is not writable by $(id -un): run \`make $action PREFIX=$PREFIX\` as a user who may write there, or choose another PREFIX" >&2
        exit 1
    fi
}

# libsat.a as one object whose only global symbols are the C ABI's, the
# ones libsat.so exports: a Rust staticlib otherwise carries every symbol of
# Rust's standard library and of SAT's crates as global, and a program that
# links two of them (or defines a clashing name) fails or, worse, mixes them.
# The bitcode sections rustc embeds are dropped: binutils' LTO plugin cannot
# read them, and nothing links SAT's bitcode.
static_archive() {
    local release=$1 to=$2 tmp
    tmp=$(mktemp -d)
    ld -r --whole-archive "$release/libsat.a" -o "$tmp/whole.o"
    nm -D --defined-only "$release/libsat.so" | awk '$3 ~ /^sat_/ {print $3}' > "$tmp/keep"
    # The personality routine's indirection lives in a COMDAT group named after
    # it: kept under Rust's name, the linker would keep libsat's copy (local
    # now) and drop another Rust static library's, whose references then find
    # nothing (a PIE link fails, a non-PIE one crashes on its first panic).
    # Renamed, each library keeps its own.
    objcopy --keep-global-symbols="$tmp/keep" \
        --redefine-sym DW.ref.rust_eh_personality=DW.ref.sat_rust_eh_personality \
        --remove-section=.llvmbc --remove-section=.llvmcmd "$tmp/whole.o" "$tmp/sat.o"
    ar rcsD "$tmp/libsat.a" "$tmp/sat.o"
    install -m 644 "$tmp/libsat.a" "$to"
    rm -rf "$tmp"
}

do_install() {
    local release="$TARGET_DIR/release"
    for f in libsat.so libsat.a satrun; do
        [ -f "$release/$f" ] || { echo "install: $release/$f is missing: build it with make install" >&2; exit 1; }
    done
    writable "$root"
    local lib="$root/$LIBDIR" made_count=0 dir="$PREFIX"
    if [ -f "$made" ]; then
        made_count=$(cat "$made")
    else
        # The prefix's own folders only, never DESTDIR's: a staged install
        # is unpacked over a tree whose folders are not the stage's.
        while [ "$dir" != / ] && [ ! -e "$DESTDIR$dir" ]; do
            made_count=$((made_count + 1))
            dir=$(dirname "$dir")
        done
    fi
    install -d "$lib/pkgconfig" "$lib/cmake/sat" "$root/include" "$root/bin" "$root/share/sat"

    install -m 755 "$release/libsat.so" "$lib/libsat.so.$VERSION"
    ln -sfn "libsat.so.$VERSION" "$lib/libsat.so.$abi"
    ln -sfn "libsat.so.$abi" "$lib/libsat.so"
    static_archive "$release" "$lib/libsat.a"
    install -m 644 include/sat.h include/sat_compat.h "$root/include/"
    install -m 755 "$release/satrun" "$root/bin/"

    local rpath="" libs="" names="" to_prefix fabric_libdir n
    [ "$RPATH" = 1 ] && rpath=" -Wl,-rpath,\${libdir}"
    for n in "${native_static[@]}"; do
        libs+="${libs:+ }-l$n"
        # CMake gets Threads::Threads for pthread.
        [ "$n" = pthread ] || names+="${names:+;}$n"
    done
    # lib/cmake/sat back to the prefix: one .. per folder.
    to_prefix=$(echo "$LIBDIR/cmake/sat" | sed -e 's|[^/][^/]*|..|g')
    fabric_libdir=$(pkg-config --variable=libdir libfabric 2>/dev/null || true)
    fill() {
        sed -e "s|@PREFIX@|$PREFIX|g" -e "s|@VERSION@|$VERSION|g" -e "s|@ABI@|$abi|g" \
            -e "s|@LIBDIR@|$LIBDIR|g" -e "s|@RPATH@|$rpath|g" -e "s|@NATIVE_STATIC_LIBS@|$libs|g" \
            -e "s|@NATIVE_STATIC_NAMES@|$names|g" -e "s|@TO_PREFIX@|$to_prefix|g" \
            -e "s|@FABRIC_LIBDIR@|$fabric_libdir|g" "sat-capi/packaging/$1" > "$2"
        chmod 644 "$2"
    }
    fill sat.pc.in "$lib/pkgconfig/sat.pc"
    fill sat-static.pc.in "$lib/pkgconfig/sat-static.pc"
    fill satConfig.cmake.in "$lib/cmake/sat/satConfig.cmake"
    fill satConfigVersion.cmake.in "$lib/cmake/sat/satConfigVersion.cmake"

    {
        for f in "libsat.so.$VERSION" "libsat.so.$abi" libsat.so libsat.a pkgconfig/sat.pc \
            pkgconfig/sat-static.pc cmake/sat/satConfig.cmake cmake/sat/satConfigVersion.cmake; do
            echo "$LIBDIR/$f"
        done
        printf '%s\n' include/sat.h include/sat_compat.h bin/satrun "$manifest_rel" "$made_rel"
    } > "$manifest"
    chmod 644 "$manifest"
    echo "$made_count" > "$made"
    chmod 644 "$made"

    echo "installed libsat $VERSION under $root"
    # The loader finds libsat.so.$abi through its cache: refresh it when this
    # is the live system's prefix and the user may (a staged DESTDIR is not).
    local found=0
    if [ -z "$DESTDIR" ] && [ "$(id -u)" -eq 0 ] && command -v ldconfig >/dev/null 2>&1; then
        ldconfig
        # ldconfig caches only the folders of its configuration: a prefix
        # outside them (/opt/sat, a home folder) stays unknown to the loader.
        ldconfig -p 2>/dev/null | grep -qF "=> $PREFIX/$LIBDIR/libsat.so.$abi" && found=1
    fi
    if [ "$found" = 0 ] && [ "$RPATH" != 1 ]; then
        echo "install: programs find libsat.so.$abi once $PREFIX/$LIBDIR is in the loader's path (a file in /etc/ld.so.conf.d naming it, then ldconfig as root; or LD_LIBRARY_PATH); or install with RPATH=1"
    fi
}

do_uninstall() {
    if [ ! -f "$manifest" ]; then
        echo "uninstall: nothing of SAT's is installed under $root (no $manifest_rel)" >&2
        exit 1
    fi
    writable "$root"
    local f d made_count=0
    [ -f "$made" ] && made_count=$(cat "$made")
    case "$made_count" in '' | *[!0-9]*) made_count=0 ;; esac
    while IFS= read -r f; do
        case "$f" in "" | /* | *..*) echo "uninstall: skipping unexpected entry '$f' in $manifest" >&2; continue ;; esac
        rm -f -- "$root/$f"
    done < "$manifest"
    # The folders install made, where nothing else is left in them.
    for d in "$LIBDIR/cmake/sat" "$LIBDIR/cmake" "$LIBDIR/pkgconfig" "$LIBDIR" include bin share/sat share; do
        [ -d "$root/$d" ] && rmdir --ignore-fail-on-non-empty -- "$root/$d"
    done
    d=$root
    while [ "$made_count" -gt 0 ] && [ -d "$d" ] && rmdir -- "$d" 2>/dev/null; do
        made_count=$((made_count - 1))
        d=$(dirname "$d")
    done
    echo "uninstalled libsat from $root"
}

case "$action" in
    install) do_install ;;
    uninstall) do_uninstall ;;
    *) echo "usage: scripts/install.sh install|uninstall" >&2; exit 2 ;;
esac
