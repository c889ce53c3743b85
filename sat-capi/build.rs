//! libsat.so's soname, `libsat.so.MAJOR`: programs linked against it load
//! any libsat of the same major version (`make install` makes the links).
//! Rust's own version script already exports only the `#[no_mangle]`
//! functions (`sat_*`); sat-capi/tests/install.rs checks it against sat.h.
//!
//! A program linked with `-L target/<profile> -lsat` records the soname, so
//! it needs `libsat.so.MAJOR` beside `libsat.so` at run time. Cargo makes no
//! such link, so this script makes it in the profile directory (a relative
//! symbolic link, dangling until the library is linked): every `-lsat` build
//! against the workspace (tests, benchmarks, examples) then runs as it is.

use std::path::PathBuf;

fn main() {
    let major = std::env::var("CARGO_PKG_VERSION_MAJOR").expect("cargo sets the version");
    let soname = format!("libsat.so.{major}");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,{soname}");
    println!("cargo:rerun-if-changed=build.rs");

    // OUT_DIR is <profile>/build/sat-capi-<hash>/out.
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let Some(profile) = out.ancestors().nth(3) else {
        return;
    };
    let link = profile.join(&soname);
    if std::fs::read_link(&link).is_ok_and(|to| to == std::path::Path::new("libsat.so")) {
        return;
    }
    let _ = std::fs::remove_file(&link);
    if let Err(e) = std::os::unix::fs::symlink("libsat.so", &link) {
        println!(
            "cargo:warning=could not link {} to libsat.so: {e}",
            link.display()
        );
    }
}
