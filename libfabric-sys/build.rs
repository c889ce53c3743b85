//! Finds the system libfabric, generates bindings for it and compiles the C
//! shim that gives its static-inline calls real symbols.

use std::env;
use std::path::PathBuf;

use bindgen::callbacks::{IntKind, ParseCallbacks};

const MIN_VERSION: &str = "1.17";

/// libfabric's flag macros are 64-bit masks, but bindgen picks the narrowest
/// type that holds each value (`FI_MSG` would come out as u32 while `FI_RMA`
/// is u64), so flags could not be or-ed together. Error numbers stay `i32`,
/// the type the calls return them in.
#[derive(Debug)]
struct MacroTypes;

impl ParseCallbacks for MacroTypes {
    fn int_macro(&self, name: &str, _value: i64) -> Option<IntKind> {
        if name == "FI_SUCCESS" || (name.starts_with("FI_E") && is_errno_name(name)) {
            Some(IntKind::I32)
        } else if name.starts_with("FI_") {
            Some(IntKind::U64)
        } else {
            None
        }
    }
}

/// The error macros of `fi_errno.h`: `FI_E` followed by an upper-case errno
/// name (`FI_EAGAIN`), as opposed to flags such as `FI_ENABLE`.
fn is_errno_name(name: &str) -> bool {
    const NOT_ERRNO: &[&str] = &["FI_ENABLE", "FI_EXCLUSIVE", "FI_EP_", "FI_EVENT"];
    !NOT_ERRNO.iter().any(|p| name.starts_with(p))
}

fn main() {
    println!("cargo:rerun-if-changed=wrapper.h");
    println!("cargo:rerun-if-changed=src/shim.h");
    println!("cargo:rerun-if-changed=src/shim.c");
    println!("cargo:rerun-if-changed=build.rs");

    let lib = match pkg_config::Config::new()
        .atleast_version(MIN_VERSION)
        .probe("libfabric")
    {
        Ok(lib) => lib,
        Err(e) => panic!(
            "\n\nlibfabric >= {MIN_VERSION} was not found through pkg-config ({e}).\n\
             Install the development files and the tools the build needs:\n\
             \n    sudo apt-get install libfabric-dev libclang-dev pkg-config\n\n\
             (or point PKG_CONFIG_PATH at the directory holding libfabric.pc).\n"
        ),
    };

    let mut shim = cc::Build::new();
    shim.file("src/shim.c").warnings(true);
    for path in &lib.include_paths {
        shim.include(path);
    }
    shim.compile("sat_fi_shim");

    let mut builder = bindgen::Builder::default()
        .header("wrapper.h")
        .allowlist_function("fi_.*")
        .allowlist_function("sat_fi_.*")
        .allowlist_type("fi_.*")
        .allowlist_type("fid_.*")
        .allowlist_var("FI_.*")
        .prepend_enum_name(false)
        .derive_default(true)
        .layout_tests(false)
        .parse_callbacks(Box::new(MacroTypes))
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()));
    for path in &lib.include_paths {
        builder = builder.clang_arg(format!("-I{}", path.display()));
    }
    let bindings = builder.generate().unwrap_or_else(|e| {
        panic!(
            "bindgen could not parse the libfabric headers ({e}); it needs libclang:\n\
             \n    sudo apt-get install libclang-dev\n"
        )
    });
    let out = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    bindings
        .write_to_file(out.join("bindings.rs"))
        .expect("writing the generated bindings to OUT_DIR");
}
