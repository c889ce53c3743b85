#!/usr/bin/env bash
# Installs what building and testing SAT needs on a Debian machine, and says
# clearly what is missing where it cannot install it. Safe to run again.
set -euo pipefail

need_apt=()
have_pkg() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
for pkg in libfabric-dev libfabric-bin libclang-dev pkg-config make gcc; do
    have_pkg "$pkg" || need_apt+=("$pkg")
done

if [ ${#need_apt[@]} -gt 0 ]; then
    if [ "$(id -u)" -eq 0 ]; then
        SUDO=""
    elif command -v sudo >/dev/null 2>&1; then
        SUDO="sudo"
    else
        echo "setup: missing Debian packages: ${need_apt[*]}" >&2
        echo "setup: install them as root: apt-get install ${need_apt[*]}" >&2
        exit 1
    fi
    echo "setup: installing ${need_apt[*]}"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

if ! pkg-config --atleast-version=1.17 libfabric; then
    echo "setup: libfabric >= 1.17 is required (found: $(pkg-config --modversion libfabric 2>/dev/null || echo none))" >&2
    exit 1
fi
if ! command -v cargo >/dev/null 2>&1; then
    echo "setup: cargo is missing: install a Rust toolchain (https://rustup.rs), then run this again" >&2
    exit 1
fi
echo "setup: ready (libfabric $(pkg-config --modversion libfabric), $(cargo --version))"
